#include "one_node.hpp"

#include "detail.hpp"

namespace distrun::launcher {

OneNodeRendezvous::OneNodeRendezvous(const JobPlan& plan, const RendezvousOptions& options)
    : plan_(plan),
      hand_socket_(options.hand_socket), hosts_{rendezvous_detail::hostname()}, nproc_{plan.nproc_per_node} {}

Assignment OneNodeRendezvous::join(int attempt, int restarts) {
  Assignment a;
  a.round = attempt;
  a.restart_count = restarts;
  a.log_attempt = restarts;
  a.world_size = plan_.nproc_per_node;
  a.master_addr = plan_.master_addr.empty() ? "127.0.0.1" : plan_.master_addr;
  // Chosen once: an explicit port, or a free one, stays the same across restarts.
  if (attempt == 0)
    workers_port_ =
        rendezvous_detail::choose_workers_port("127.0.0.1", plan_.master_port, hand_socket_, workers_socket_);
  a.master_port = workers_port_;
  a.listen_fd = workers_socket_.fd();
  a.secret = random_hex(16);
  return a;
}

}  // namespace distrun::launcher
