// How the agents (one distrun per node) agree on each attempt: world size, each node's first
// global rank, the workers' MASTER_PORT and store secret. With several nodes, node 0 hosts a
// TCPStore on --master-port and publishes the plan through it, as torch elastic's static
// rendezvous does; with one node there is nothing to agree on.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "job_plan.hpp"

namespace distrun {
class TCPStore;
}

namespace distrun::launcher {

/// What one attempt gives this node's workers.
struct Assignment {
  int world_size = 1;
  int rank_offset = 0;  // global rank of local rank 0
  std::string master_addr;
  uint16_t master_port = 0;
  bool port_was_picked = false;  // a free port we chose (may be raced for: retry on "in use")
  std::string secret;            // DISTRUN_STORE_SECRET for the workers
};

class Rendezvous {
 public:
  /// Multi-node: node 0 binds plan.master_port (StoreError "already in use" when taken),
  /// others connect to it, waiting up to `timeout`.
  Rendezvous(const JobPlan& plan, std::chrono::milliseconds timeout);
  ~Rendezvous();

  /// Meets the other nodes for `attempt` (0, 1, ... counts restarts and port retries) and
  /// returns this node's share. TimeoutError naming the nodes that never came.
  Assignment join(int attempt);
  /// Tells the other nodes that this node's workers failed in `attempt`.
  void report_failure(int attempt, const std::string& what);
  /// True when another node reported a failure in `attempt` (never throws; a vanished node 0
  /// reads as no news).
  bool peer_failed(int attempt);
  /// After local success: waits (bounded) until every node finished `attempt`; false when
  /// some node reported a failure instead.
  bool finish(int attempt);

 private:
  std::string key(int attempt, const std::string& name) const;

  JobPlan plan_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<TCPStore> store_;  // null on one node
  bool store_alive_ = true;
};

}  // namespace distrun::launcher
