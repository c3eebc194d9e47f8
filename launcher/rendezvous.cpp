#include "rendezvous.hpp"

#include <unistd.h>

#include <sstream>
#include <thread>

#include "distrun/core/error.hpp"
#include "distrun/store/tcp_store.hpp"
#include "ports.hpp"

namespace distrun::launcher {
namespace {

std::string where(const JobPlan& plan) { return plan.master_addr + ":" + std::to_string(*plan.master_port); }

std::string hostname() {
  char buf[256] = {};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

}  // namespace

Rendezvous::Rendezvous(const JobPlan& plan, std::chrono::milliseconds timeout) : plan_(plan), timeout_(timeout) {
  if (plan_.single_node()) return;
  TCPStoreOptions opts;
  opts.is_server = plan_.node_rank == 0;
  opts.timeout = timeout_;
  try {
    store_ = std::make_unique<TCPStore>(plan_.master_addr, *plan_.master_port, opts);
  } catch (const StoreError& e) {
    if (opts.is_server) throw StoreError("rendezvous: node 0 cannot host it on --master-port " + where(plan_) + ": " + e.what());
    throw StoreError("rendezvous: cannot reach node 0 at " + where(plan_) + ": " + e.what());
  } catch (const TimeoutError& e) {
    throw TimeoutError("rendezvous: node 0 at " + where(plan_) + " did not answer within " +
                       std::to_string(timeout_.count() / 1000) + " s (is node 0 started?): " + e.what());
  }
}

Rendezvous::~Rendezvous() = default;

std::string Rendezvous::key(int attempt, const std::string& name) const {
  return "distrun/rdzv/" + plan_.run_id + "/" + std::to_string(attempt) + "/" + name;
}

Assignment Rendezvous::join(int attempt) {
  Assignment a;
  a.master_addr = plan_.master_addr;
  if (!store_) {
    a.world_size = plan_.nproc_per_node;
    a.master_addr = plan_.master_addr.empty() ? "127.0.0.1" : plan_.master_addr;
    // The user's port is used once (and checked); a picked one is picked afresh each attempt.
    if (plan_.master_port && attempt == 0) {
      if (!port_is_free(*plan_.master_port))
        throw ConfigError("--master-port " + std::to_string(*plan_.master_port) +
                          ": the port is already in use on this host (pick another, or drop it to use a free one)");
      a.master_port = *plan_.master_port;
    } else {
      a.master_port = pick_free_port();
      a.port_was_picked = true;
    }
    a.secret = random_hex(16);
    return a;
  }

  const int k = plan_.node_rank;
  if (attempt == 0 && store_->add(key(0, "claim/" + std::to_string(k)), 1) > 1)
    throw ConfigError("rendezvous: two agents claim --node-rank " + std::to_string(k));
  store_->set(key(attempt, "node/" + std::to_string(k)), std::to_string(plan_.nproc_per_node) + " " + hostname());

  if (k == 0) {
    std::vector<std::string> keys;
    for (int n = 0; n < plan_.nnodes; ++n) keys.push_back(key(attempt, "node/" + std::to_string(n)));
    try {
      store_->wait(keys, timeout_);
    } catch (const TimeoutError&) {
      std::string missing;
      for (int n = 0; n < plan_.nnodes; ++n)
        if (!store_->check({keys[n]})) missing += (missing.empty() ? "" : ", ") + std::to_string(n);
      throw TimeoutError("rendezvous: node(s) " + missing + " of " + std::to_string(plan_.nnodes) +
                         " never joined at " + where(plan_) + " within " + std::to_string(timeout_.count() / 1000) + " s");
    }
    std::ostringstream out;
    out << pick_free_port() << " " << random_hex(16);
    for (auto& kk : keys) out << " " << std::stoi(store_->get(kk));
    store_->set(key(attempt, "plan"), out.str());
  }
  std::string text;
  try {
    store_->wait({key(attempt, "plan")}, timeout_);
    text = store_->get(key(attempt, "plan"));
  } catch (const TimeoutError&) {
    throw TimeoutError("rendezvous: no plan from node 0 at " + where(plan_) + " within " +
                       std::to_string(timeout_.count() / 1000) + " s (some node never joined)");
  }
  std::istringstream in(text);
  int port = 0;
  in >> port >> a.secret;
  a.master_port = uint16_t(port);
  a.port_was_picked = true;
  a.world_size = 0;
  for (int n = 0, nproc; n < plan_.nnodes && in >> nproc; ++n) {
    if (n < k) a.rank_offset += nproc;
    a.world_size += nproc;
  }
  return a;
}

void Rendezvous::report_failure(int attempt, const std::string& what) {
  if (!store_ || !store_alive_) return;
  try {
    store_->set(key(attempt, "failed"), "node " + std::to_string(plan_.node_rank) + ": " + what);
  } catch (const Error&) {
    store_alive_ = false;
  }
}

bool Rendezvous::peer_failed(int attempt) {
  if (!store_ || !store_alive_) return false;
  try {
    return store_->check({key(attempt, "failed")});
  } catch (const Error&) {
    store_alive_ = false;  // node 0's agent is gone; its workers went with it, ours will notice
    return false;
  }
}

bool Rendezvous::finish(int attempt) {
  if (!store_ || !store_alive_) return true;
  try {
    store_->add(key(attempt, "done"), 1);
    auto deadline = std::chrono::steady_clock::now() + timeout_;
    // Node 0 hosts the store: it stays until the others have read what they need.
    while (std::chrono::steady_clock::now() < deadline) {
      if (store_->check({key(attempt, "failed")})) return false;
      if (store_->add(key(attempt, "done"), 0) >= plan_.nnodes) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    throw TimeoutError("rendezvous: not every node finished attempt " + std::to_string(attempt) + " within " +
                       std::to_string(timeout_.count() / 1000) + " s");
  } catch (const StoreError&) {
    store_alive_ = false;  // node 0 left after everyone finished
    return true;
  }
}

}  // namespace distrun::launcher
