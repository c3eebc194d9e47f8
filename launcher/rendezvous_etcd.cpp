// --rdzv-backend etcd (torchrun's etcd and etcd-v2): the elastic rounds of
// rendezvous_round.cpp, kept in an etcd cluster instead of node 0's agent, so that the job
// outlives any one host. No agent is special: each takes a ticket (ids from 1), holds an
// "alive" key on a lease that lapses lease-TTL seconds after it dies or freezes, sends
// heartbeats and watches every other member (watch()); the first to claim a round's "closer"
// key closes it (a closer that dies lets its claim lapse, and another takes over); node rank 0
// of each round serves the workers' store on its own address and port, read from its entry:
//   node/ID            "NPROC HOST ADDRESS PORT" (ADDRESS: this host as etcd reaches it)
//   R/closer           the agent closing round R (leased)
// Values carry an HMAC under the job secret (etcd/etcd_store.hpp).
#include <sstream>
#include <thread>

#include "distrun/etcd/etcd_store.hpp"
#include "rendezvous.hpp"
#include "rendezvous_detail.hpp"

namespace distrun::launcher {

using namespace rendezvous_detail;

namespace {

// Long enough to ride out an election (etcd's default election timeout is 1 s).
constexpr milliseconds kEtcdCallTimeout{5000};
constexpr int kLeaseSeconds = 3;

}  // namespace

void Rendezvous::open_etcd_store() {
  if (!plan_.elastic())
    throw ConfigError("--rdzv-backend etcd: give an elastic --nnodes MIN:MAX (the rounds are kept in etcd)");
  auto store = std::make_unique<etcd::EtcdStore>(etcd::parse_endpoints(opt_.etcd_endpoints), opt_.secret,
                                                 kEtcdCallTimeout, kLeaseSeconds);
  etcd_ = store.get();
  store_ = std::move(store);
  try {
    etcd_->set_if_absent(key("elastic"), elastic_range(plan_));
    const std::string theirs = store_->get(key("elastic"));
    if (theirs != elastic_range(plan_))
      throw ConfigError("rendezvous: --nnodes " + elastic_range(plan_) + " here, but " + theirs +
                        " on the other agents of run " + plan_.run_id + " in etcd: give the same range on every node");
    id_ = int(store_->add(key("ticket"), 1));
    etcd_->claim(key("alive/" + std::to_string(id_)), "1");
  } catch (const TimeoutError& e) {
    throw TimeoutError("rendezvous: etcd at " + opt_.etcd_endpoints + " did not answer: " + e.what());
  }
  // This host's address on the path to etcd: where the other nodes reach its workers.
  bind_ip_ = etcd_->local_address();
  choose_workers_port(opt_.workers_port);
  store_->set(key("node/" + std::to_string(id_)), std::to_string(plan_.nproc_per_node) + " " + host_ + " " + bind_ip_ +
                                                      " " + std::to_string(workers_port_));
  store_->set_timeout(kRequestTimeout);
}

void Rendezvous::close_etcd_round(int round, Clock::time_point deadline) {
  const std::string plan_key = key(round, "plan");
  while (Clock::now() < deadline) {
    if (store_->check({plan_key})) return;
    if (etcd_->claim_if_absent(key(round, "closer"), std::to_string(id_))) {
      store_->add(key("round"), round - store_->add(key("round"), 0));
      RoundPlan p = close_round(round, deadline);
      // The workers' store is served by node rank 0's agent, on its own port.
      std::istringstream first(store_->get(key("node/" + std::to_string(p.ids.at(0)))));
      std::string nproc, host, address, port;
      first >> nproc >> host >> address >> port;
      p.port = uint16_t(to_int(port, 1, 65535));
      // Once: a closer that was frozen past its claim's lease may find another's plan there.
      etcd_->set_if_absent(plan_key, p.encode());
      return;
    }
    try {
      wait_keys(round, {plan_key}, Clock::now() + kSlice);
      return;
    } catch (const TimeoutError&) {
      // No plan yet: its closer may have died; try to claim the round again.
    }
  }
}

std::string Rendezvous::etcd_member_address(int id) {
  std::istringstream node(store_->get(key("node/" + std::to_string(id))));
  std::string nproc, host, address;
  if (!(node >> nproc >> host >> address))
    throw StoreError("rendezvous: malformed entry of agent " + std::to_string(id));
  return address;
}

FailureRecord Rendezvous::etcd_lost(const std::exception& e) const {
  FailureRecord r;
  r.final = true;
  r.host = "etcd";
  r.node_rank = -1;
  r.cause = "the etcd cluster at " + opt_.etcd_endpoints + " stopped answering: " + e.what();
  return r;
}

}  // namespace distrun::launcher
