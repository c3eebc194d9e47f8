// How the agents (one distrun per node) agree on each attempt and share one fate. With several
// nodes, node 0 hosts a TCPStore on --master-port (bound to the interface of --master-addr,
// opened only by the job secret) and publishes the plan through it, as torch elastic's static
// rendezvous does. During the run every agent polls it: the other agents send heartbeats,
// node 0 names an agent whose heartbeat stopped, and the first failure anywhere is written
// once and read by all. With one node there is nothing to agree on.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "distrun/core/error.hpp"
#include "job_plan.hpp"
#include "ports.hpp"
#include "signal_watch.hpp"

namespace distrun {
class TCPStore;
}

namespace distrun::launcher {

/// The job's first failure, as every node prints it.
struct FailureRecord {
  bool final = false;  // ends the job even with restarts left (an agent is gone or was stopped)
  std::string host;
  int node_rank = 0;
  int rank = -1;  // global rank of the failed worker; -1 when the agent itself failed
  std::string cause;

  /// "host H, node rank K, rank R: CAUSE" (rank omitted for an agent).
  std::string summary() const;
  std::string encode() const;
  /// StoreError when `text` is not an encoded record.
  static FailureRecord decode(const std::string& text);
};

/// The job failed on some node: `record` says where first. Exit 1.
class JobFailed : public Error {
 public:
  explicit JobFailed(FailureRecord record) : Error("job failed; first failure: " + record.summary()), record_(std::move(record)) {}
  const FailureRecord& record() const { return record_; }

 private:
  FailureRecord record_;
};

/// What one attempt gives this node's workers.
struct Assignment {
  int world_size = 1;
  int rank_offset = 0;  // global rank of local rank 0
  std::string master_addr;
  uint16_t master_port = 0;
  std::string secret;  // DISTRUN_STORE_SECRET for the workers (fresh per attempt)
  int listen_fd = -1;  // the bound workers' port for local rank 0, or -1 (borrowed)
};

struct RendezvousOptions {
  std::chrono::milliseconds timeout{300000};    // the nodes wait this long for each other
  std::string secret;                           // the job secret (required with several nodes)
  bool bind_all = false;                        // node 0 listens on 0.0.0.0
  std::optional<uint16_t> workers_port;         // several nodes: fixed workers' port on node 0
  bool hand_socket = false;                     // bind the workers' port here, hand it to rank 0
  bool scenario = false;                        // distrun-worker runs: --results must agree
  bool results_given = false;                   // this node got --results
  std::chrono::milliseconds heartbeat_timeout{3000};  // an agent silent this long is gone
};

/// The multi-node plan node 0 publishes; parse_plan() reads it (StoreError when malformed).
struct PlanText {
  bool refused = false;
  std::string message;  // why node 0 refused the job
  uint16_t port = 0;
  std::string secret;
  std::vector<int> nproc;          // per node
  std::vector<std::string> hosts;  // per node
};
PlanText parse_plan(const std::string& text, int nnodes);

class Rendezvous {
 public:
  /// Multi-node: node 0 binds plan.master_port (StoreError "already in use" when taken),
  /// others connect to it, waiting up to options.timeout. Signals in `signals` interrupt
  /// every wait (Interrupted).
  Rendezvous(const JobPlan& plan, const RendezvousOptions& options, SignalWatch& signals);
  ~Rendezvous();

  /// Meets the other nodes for `attempt` and returns this node's share. TimeoutError naming
  /// the nodes that never came; JobFailed when a node failed meanwhile; ConfigError when node
  /// 0 refused the job (mismatched options); Interrupted on a signal (the others are told).
  Assignment join(int attempt);
  /// During the run (every few hundred ms): sends this agent's heartbeat and returns the job's
  /// first failure once there is one (another node's, a silent agent's, or the lost store).
  std::optional<FailureRecord> watch(int attempt);
  /// Records `mine` as the job's failure unless another came first; returns the first.
  FailureRecord report_failure(int attempt, const FailureRecord& mine);
  /// After local success: waits until every node finished `attempt` (nullopt) or one failed.
  std::optional<FailureRecord> finish(int attempt);
  /// After a failure: others say they have read it; node 0 waits (bounded) for that before
  /// leaving, since its exit takes the store away.
  void acknowledge(int attempt);

  bool multi_node() const { return store_ != nullptr; }
  /// This node's host name.
  const std::string& host() const { return host_; }

 private:
  std::string key(int attempt, const std::string& name) const;
  std::string key(const std::string& name) const;
  // Waits for `keys` in short slices, so that signals and failures are seen at once.
  void wait_keys(int attempt, const std::vector<std::string>& keys, std::chrono::steady_clock::time_point deadline);
  void check_signal(int attempt, const std::string& during);
  FailureRecord store_lost(const std::exception& e) const;
  Assignment single_node(int attempt);

  JobPlan plan_;
  RendezvousOptions opt_;
  SignalWatch& signals_;
  std::string host_;
  std::unique_ptr<TCPStore> store_;  // null on one node
  bool store_alive_ = true;
  std::string bind_ip_;
  /// Binds and holds the workers' port (when the socket is handed to rank 0), or checks that
  /// `requested` is free, or picks a free one: once per job, so restarts keep it.
  void choose_workers_port(std::optional<uint16_t> requested);
  BoundPort workers_socket_;  // held for the whole job: the port stays across restarts
  uint16_t workers_port_ = 0;
  std::vector<std::string> hosts_;  // per node, from the plan
  // Node 0: each agent's last heartbeat count and when it last changed.
  std::vector<int64_t> beats_;
  std::vector<std::chrono::steady_clock::time_point> beat_seen_;
  std::set<int> vanished_;
};

}  // namespace distrun::launcher
