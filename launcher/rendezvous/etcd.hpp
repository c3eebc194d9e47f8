// --rdzv-backend etcd (torchrun's etcd and etcd-v2): the elastic rounds of elastic.*, kept in
// an etcd cluster instead of an agent's store, so that the job outlives any one host. No agent
// is special: each takes a ticket (ids from 1), holds an "alive" key on a lease that lapses
// lease-TTL seconds after it dies or freezes, sends heartbeats and watches every other member;
// the first to claim a round's "closer" key closes it (a closer that dies lets its claim lapse,
// and another takes over); node rank 0 of each round serves the workers' store on its own
// address and port, read from its entry. Keys besides the elastic ones:
//   node/ID            "NPROC HOST ADDRESS PORT" (ADDRESS: this host as etcd reaches it)
//   R/closer           the agent closing round R (leased)
//   R/settled          round R's first failure as every agent prints it
// Values carry an HMAC under the job secret (distrun/etcd/etcd_store.hpp).
#pragma once
#include "elastic.hpp"

namespace distrun::etcd {
class EtcdStore;
}

namespace distrun::launcher {

class EtcdRendezvous : public ElasticRendezvous {
 public:
  EtcdRendezvous(const JobPlan& plan, const RendezvousOptions& options, SignalWatch& signals);

  // No agent hosts the store to settle the record for the others: the first agent to settle
  // it does, in one transaction, once every member has read the failure (a frozen worker
  // found meanwhile has replaced the record by then) or that wait ran out; every agent prints
  // what was settled.
  std::optional<FailureRecord> first_failure(int attempt) override;

 protected:
  bool watches_members() const override { return true; }
  std::string claim_lost_cause() const override;
  // etcd's leases leave no count: one watch over the members' claims counts their changes
  // (a lease that lapsed deletes its key).
  int64_t claims_lost() override;
  // No host to say that the job is over: each agent that sees every member done does.
  void all_finished() override { mark_closed("ok"); }
  FailureRecord store_lost(const std::exception& e) const override;
  // The first writer wins in one transaction (create if absent): no count to read apart
  // from the record.
  bool record_first(int attempt, const FailureRecord& mine) override;
  // Every member, none hosting the store.
  std::vector<int> readers(int attempt) const override;
  std::string where() const override;
  void form_round(int round, Clock::time_point deadline) override;
  void place_workers(Assignment& a, const RoundPlan& p) override;

 private:
  // The node/ID entry of agent `id`, split into its words.
  std::vector<std::string> member_entry(int id);

  etcd::EtcdStore* etcd_ = nullptr;  // store_, as an EtcdStore
};

}  // namespace distrun::launcher
