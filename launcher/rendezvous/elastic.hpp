// Elastic rounds (--nnodes MIN:MAX), as torch's c10d dynamic rendezvous forms them: the agent
// on the host of --master-addr (--rdzv-endpoint) hosts the store and closes each round (once
// MIN joined and last_call_timeout passed, or at MAX); each round has its own members, plan and
// failure record, so a node that leaves or arrives ends the round and the survivors meet again
// in the next one.
#pragma once
#include "store_rendezvous.hpp"

namespace distrun::launcher {

class ElasticRendezvous : public StoreRendezvous {
 public:
  ElasticRendezvous(const JobPlan& plan, const RendezvousOptions& options, SignalWatch& signals);

  /// Joins rounds from `round` on until one admits this node; the round decides the attempt,
  /// the node rank and the job's restart count.
  Assignment join(int round, int restarts) override;
  bool leaving_is_final(int attempt) const override;
  std::string restart_reason(const FailureRecord& first) const override;

 protected:
  // For a kind that opens the store itself (and then takes its ticket and workers' port).
  struct StoreOpenedByKind {};
  ElasticRendezvous(const JobPlan& plan, const RendezvousOptions& options, SignalWatch& signals, StoreOpenedByKind);
  // After this agent joined `round`: the host closes it and publishes its plan.
  virtual void form_round(int round, Clock::time_point deadline);
  // Where this node's workers of `p` meet (the share gives the store's host and its socket).
  virtual void place_workers(Assignment& /*a*/, const RoundPlan& /*p*/) {}
  // The host: waits for the round's members and returns its plan.
  RoundPlan close_round(int round, Clock::time_point deadline);

  bool loss_is_final(size_t members) const override { return int(members) - 1 < plan_.min_nodes; }
  std::string final_loss_note() const override;
  std::optional<FailureRecord> newcomer(int attempt) override;
  void mark_closed(const std::string& text) override;
  void check_closed() override;
  std::vector<std::string> closing_keys() const override { return {key("closed")}; }
  bool leave(int attempt, int sig) override;
  std::vector<int> readers(int attempt) const override;

 private:
  // Connects to the store, or hosts it when this host is the endpoint's and its port is free.
  void open_store(const std::string& master_ip, Clock::time_point deadline);
  // Not the host: checks the host's range and takes this agent's ticket.
  void take_ticket(Clock::time_point deadline);
  // The job's restart count for `round`: one more after a round that failed, none for a join.
  int restart_count(int round);
  // The host of a node waiting in `round` that has not left since (nullopt: none waits).
  std::optional<std::string> waiting_node(int round);

  bool first_join_ = true;  // a newcomer starts from the round being run
};

}  // namespace distrun::launcher
