// --nnodes N: node 0 hosts the store on --master-port (bound to the interface of
// --master-addr, opened only by the job secret); each node declares itself for the attempt,
// node 0 publishes the plan (ports, the salt of the workers' secret, every node's share), and
// every node derives its share from it, as torch elastic's static rendezvous does.
#pragma once
#include "store_rendezvous.hpp"

namespace distrun::launcher {

class StaticRendezvous : public StoreRendezvous {
 public:
  StaticRendezvous(const JobPlan& plan, const RendezvousOptions& options, SignalWatch& signals);

  Assignment join(int attempt, int restarts) override;
  bool leaving_is_final(int /*attempt*/) const override { return true; }
  std::string restart_reason(const FailureRecord& /*first*/) const override { return "another node failed"; }

  /// Not node 0: records `why` as the job's first failure for `attempt`, in node 0's store.
  void refuse(int attempt, const std::string& why);

 protected:
  bool loss_is_final(size_t /*members*/) const override { return true; }
  bool leave(int /*attempt*/, int /*sig*/) override { return true; }
  std::vector<int> readers(int attempt) const override;

 private:
  // ConfigError (and node 0 told) when node 0 was given another --nnodes.
  void check_same_nnodes(Clock::time_point deadline);
  // The node ranks whose entry of `keys` is not there yet, as "1, 3".
  std::string missing_nodes(const std::vector<std::string>& keys) const;
  // Node 0: waits for `keys`, every node's entry; ConfigError as soon as a peer proved another
  // job secret.
  void wait_for_nodes(int attempt, const std::vector<std::string>& keys, Clock::time_point deadline);
  // Node 0, while waiting: the first node that joined `attempt` and then left without a word,
  // as the failure; named as node 0's own stall when this agent did not run for `stalled`.
  std::optional<FailureRecord> node_left(int attempt, const std::vector<std::string>& keys,
                                         std::chrono::milliseconds stalled);
  // Node 0: waits for every node's entry and publishes the plan of `attempt`.
  void publish_plan(int attempt, Clock::time_point deadline);
  // Node 0, after refusing the job: waits (bounded) until the others read the refusal.
  void linger_for_readers(int attempt);
};

}  // namespace distrun::launcher
