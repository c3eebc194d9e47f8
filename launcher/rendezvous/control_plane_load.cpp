#include "control_plane_load.hpp"

#include <arpa/inet.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <sstream>
#include <thread>

#include "detail.hpp"
#include "distrun/bench/control_plane_processes.hpp"
#include "static_nodes.hpp"

namespace distrun::launcher {

namespace {

using bench::ControlPlaneOptions;
using namespace bench::control_plane;

// Descriptors an agent holds in its process: its store client's (one connection for its
// requests and its listener), a socket and an I/O context's epoll set, eventfd and timerfd,
// with one to spare; node 0 holds the server's end of the connection.
constexpr int64_t kFdsPerAgent = 5;
constexpr int64_t kNode0FdsPerAgent = 1;

JobPlan agent_plan(const ControlPlaneOptions& o, int node_rank, const std::string& master_addr, uint16_t port) {
  JobPlan p;
  p.nnodes = p.min_nodes = int(o.clients) + 1;
  p.node_rank = node_rank;
  p.master_addr = master_addr;
  p.master_port = port;
  p.port_from_user = true;
  p.run_id = "control-plane-bench";
  return p;
}

RendezvousOptions rendezvous_options(const ControlPlaneOptions& o, const std::string& secret) {
  RendezvousOptions r;
  r.timeout = o.timeout;
  r.secret = secret;
  // Node 0 listens on every address, and the agents reach it on many loopback ones (127.1.x.y),
  // so that no address's ephemeral ports run out.
  r.bind_all = true;
  return r;
}

std::string agent_address(int64_t agent, int64_t per_address) {
  in_addr a{htonl(loopback_address(agent, per_address))};
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &a, text, sizeof text);
  return text;
}

// Node 0's agent: says its port, joins round 0 on 'j' (says when its plan is out), then
// watches every interval as a running agent does, answering 'u' with its CPU so far and saying
// when it saw a failure (and whose); when its pipe closes, its peak RSS and CPU.
int node0(const ControlPlaneOptions& o, const std::string& secret, int in, int out) {
  raise_fd_limit(o.clients * kNode0FdsPerAgent + kSpareFds);
  SignalWatch signals;
  const uint16_t port = pick_free_port("0.0.0.0");
  StaticRendezvous rendezvous(agent_plan(o, 0, "127.0.0.1", port), rendezvous_options(o, secret), signals);
  write_line(out, "port " + std::to_string(port));
  char c = 0;
  if (::read(in, &c, 1) != 1) return 1;
  rendezvous.join(0, 0);
  write_line(out, "joined " + std::to_string(now_s()));
  const double interval = double(o.interval.count()) / 1000;
  bool told = false;
  for (double next = now_s();;) {
    pollfd p{in, POLLIN, 0};
    if (::poll(&p, 1, int(std::max(0.0, next - now_s()) * 1000)) > 0) {
      if (::read(in, &c, 1) != 1) break;
      if (c == 'u') write_line(out, "cpu " + std::to_string(own_cpu_s()));
      continue;
    }
    next = now_s() + interval;
    if (told) continue;
    if (auto first = rendezvous.watch(0)) {
      told = true;
      write_line(out, "told " + std::to_string(now_s()) + " " + std::to_string(first->node_rank));
    }
  }
  write_line(out, own_usage());
  return 0;
}

enum Phase { kConnect = 1, kJoin, kRun, kKill, kEnd };

// The phases of a client process's agents, moved on by its main thread; each agent thread
// counts itself through each one.
class Phases {
 public:
  void advance(int phase) {
    std::lock_guard<std::mutex> lock(mu_);
    phase_ = phase;
    cv_.notify_all();
  }
  // Waits for `phase` (or the end, or another agent's error) at most `within`; whether it came.
  bool reach(int phase, double within = 1e9) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::duration<double>(within),
                        [&] { return phase_ >= phase || !error_.empty(); });
  }
  // The run is over (the pipe closed) or failed: an agent stops where it is.
  bool over() {
    std::lock_guard<std::mutex> lock(mu_);
    return phase_ >= kEnd || !error_.empty();
  }
  void done(double at) {
    std::lock_guard<std::mutex> lock(mu_);
    ++done_;
    last_ = std::max(last_, at);
    cv_.notify_all();
  }
  void fail(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_.empty()) error_ = what;
    cv_.notify_all();
  }
  // Waits until `count` agents in all are done (since the start); the last one's time.
  double all_done(int64_t count, double deadline, const std::string& doing) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::duration<double>(std::max(0.0, deadline - now_s())),
                 [&] { return done_ >= count || !error_.empty(); });
    if (!error_.empty()) throw StoreError("an agent failed: " + error_);
    if (done_ < count)
      throw TimeoutError(std::to_string(count - done_) + " agents still " + doing + " at the deadline");
    return last_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int phase_ = 0;
  int64_t done_ = 0;
  double last_ = 0;
  std::string error_;
};

// Agents `first`..`first + count - 1` (node ranks one more), a thread each: connect on 'c',
// join on 'j', and from 'r' watch every interval until told of a failure; on 'k' the last
// agent of the job closes its connection (as its death would). Each step but 'r' is said with
// the time its last agent finished it; the connections stay until the pipe closes.
int agents(const ControlPlaneOptions& o, uint16_t port, const std::string& secret, int64_t first, int64_t count, int in,
           int out) {
  raise_fd_limit(count * kFdsPerAgent + kSpareFds);
  SignalWatch signals;  // before any thread, which inherits its mask
  const RendezvousOptions options = rendezvous_options(o, secret);
  const int victim = int(o.clients);
  Phases phases;
  double killed = 0;
  std::vector<std::thread> threads;
  for (int64_t i = first; i < first + count; ++i) {
    threads.emplace_back([&, i] {
      const int rank = int(i) + 1;
      try {
        phases.reach(kConnect);
        if (phases.over()) return;
        auto agent = std::make_unique<StaticRendezvous>(agent_plan(o, rank, agent_address(i, o.per_address), port),
                                                        options, signals);
        phases.done(now_s());
        phases.reach(kJoin);
        if (phases.over()) return;
        agent->join(0, 0);
        phases.done(now_s());
        phases.reach(kRun);
        const double interval = double(o.interval.count()) / 1000;
        while (!phases.over()) {
          if (rank == victim && phases.reach(kKill, interval)) {
            killed = now_s();
            agent.reset();
            phases.done(0);
            break;
          }
          if (rank != victim) phases.reach(kEnd, interval);
          if (auto first_failure = agent->watch(0)) {
            if (first_failure->node_rank != victim)
              throw StoreError("told of a failure of node " + std::to_string(first_failure->node_rank) +
                               ", not of node " + std::to_string(victim) + ": " + first_failure->cause);
            phases.done(now_s());
            break;
          }
        }
        phases.reach(kEnd);
      } catch (const std::exception& e) {
        phases.fail(e.what());
      }
    });
  }
  try {
    const double deadline = now_s() + double(o.timeout.count()) / 1000;
    // The agents' run (their watches, and the listener each opens at its first) starts once the
    // whole round is through, so that round_s times the round alone.
    const std::pair<Phase, const char*> steps[] = {{kConnect, "connected"},
                                                   {kJoin, "joined"},
                                                   {kRun, nullptr},
                                                   {kKill, "told"}};
    int64_t through = 0;
    char c = 0;
    for (const auto& [phase, word] : steps) {
      if (::read(in, &c, 1) != 1) break;
      phases.advance(phase);
      if (!word) continue;
      through += count;
      const double last = phases.all_done(through, deadline, std::string("not ") + word);
      if (phase == kKill && killed > 0) write_line(out, "killed " + std::to_string(killed));
      write_line(out, std::string(word) + " " + std::to_string(last));
    }
    while (::read(in, &c, 1) > 0) {
    }
  } catch (const std::exception& e) {
    // Said here, without unwinding past the agents' threads, which are still running.
    std::string what = e.what();
    std::replace(what.begin(), what.end(), '\n', ' ');
    write_line(out, "error " + what);
    ::_exit(1);
  }
  phases.advance(kEnd);
  for (auto& t : threads) t.join();
  return 0;
}

void check_options(const ControlPlaneOptions& o) {
  if (o.clients < 1 || o.clients >= rendezvous_detail::kMaxNodes)
    throw ConfigError("--clients: 1 to " + std::to_string(rendezvous_detail::kMaxNodes - 1) + " agents");
  if (o.per_address < 1 || o.per_address > 28000) throw ConfigError("--per-address: 1 to 28000 (the ephemeral ports)");
  if (o.interval.count() < 1) throw ConfigError("--interval: at least 1 ms");
  if (o.heartbeat_window.count() < 1) throw ConfigError("--heartbeat-window: at least 1 ms");
}

}  // namespace

bench::ControlPlaneResult run_rendezvous_load(const ControlPlaneOptions& o) {
  check_options(o);
  const int64_t limit = raise_fd_limit(o.clients * kFdsPerAgent + kSpareFds);
  if (o.clients * kNode0FdsPerAgent + kSpareFds > limit)
    throw ConfigError("--clients " + std::to_string(o.clients) + ": node 0 needs " +
                      std::to_string(o.clients * kNode0FdsPerAgent + kSpareFds) +
                      " descriptors, and this process may open " + std::to_string(limit) +
                      " (RLIMIT_NOFILE's hard limit)");
  bench::ControlPlaneResult r;
  r.options = o;
  const std::string secret = random_hex(32);
  Child server = fork_child("node 0's agent", {}, [&](int in, int out) { return node0(o, secret, in, out); });
  std::vector<Child> procs;
  const ServerUsage usage = run_processes(server, procs, [&] {
    const auto port = uint16_t(number_in(server.line(now_s() + 60), "port"));
    const int64_t per_proc = (limit - kSpareFds) / kFdsPerAgent;
    const int64_t nproc = (o.clients + per_proc - 1) / per_proc;
    std::vector<int> parent_fds{server.to, server.from};
    for (int64_t p = 0; p < nproc; ++p) {
      const int64_t first = p * o.clients / nproc, count = (p + 1) * o.clients / nproc - first;
      procs.push_back(fork_child("agent process " + std::to_string(p), parent_fds,
                                 [&](int in, int out) { return agents(o, port, secret, first, count, in, out); }));
      parent_fds.push_back(procs.back().to);
      parent_fds.push_back(procs.back().from);
    }
    r.client_processes = int(nproc);
    const double deadline = now_s() + double(o.timeout.count()) / 1000 + 5;
    // The last line of each process for one step: its last agent's time.
    auto step = [&](char command, const std::string& word, double since) {
      for (auto& p : procs) p.say(command);
      double last = since;
      for (auto& p : procs) last = std::max(last, number_in(p.line(deadline), word));
      return last;
    };
    const double t0 = now_s();
    r.connect_s = step('c', "connected", t0) - t0;
    const double t1 = now_s();
    server.say('j');
    const double joined = step('j', "joined", t1);
    r.round_s = std::max(joined, number_in(server.line(deadline), "joined")) - t1;
    for (auto& p : procs) p.say('r');

    // The agents watch as running agents do; node 0's CPU over a window of that, after a
    // moment for the round's stragglers to settle.
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    auto server_cpu = [&] {
      server.say('u');
      return number_in(server.line(deadline), "cpu");
    };
    const double cpu0 = server_cpu(), w0 = now_s();
    std::this_thread::sleep_for(o.heartbeat_window);
    const double cpu1 = server_cpu(), w1 = now_s();
    r.heartbeat_cpu_pct = 100 * (cpu1 - cpu0) / (w1 - w0);

    for (auto& p : procs) p.say('k');
    double killed = 0, told = 0;
    for (auto& p : procs) {
      std::string l = p.line(deadline);
      if (l.rfind("killed ", 0) == 0) {
        killed = number_in(l, "killed");
        l = p.line(deadline);
      }
      told = std::max(told, number_in(l, "told"));
    }
    std::istringstream seen(server.line(deadline));
    std::string word;
    double at = 0;
    int whose = -1;
    seen >> word >> at >> whose;
    if (word != "told" || whose != int(o.clients))
      throw StoreError("control-plane bench: node 0 did not name node " + std::to_string(o.clients) + " as lost");
    r.failure_fanout_s = std::max(told, at) - killed;
  });
  r.server_peak_rss_mb = usage.peak_rss_mb;
  r.server_cpu_s = usage.cpu_s;
  return r;
}

}  // namespace distrun::launcher
