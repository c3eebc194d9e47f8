#include "etcd.hpp"

#include <sstream>

#include "detail.hpp"
#include "distrun/etcd/etcd_store.hpp"

namespace distrun::launcher {

using namespace rendezvous_detail;

namespace {

// Long enough to ride out an election (etcd's default election timeout is 1 s).
constexpr milliseconds kEtcdCallTimeout{5000};
constexpr int kLeaseSeconds = 3;

// The cluster's endpoints, with --rdzv-conf protocol's scheme where they give none.
std::vector<std::string> endpoints(const RendezvousOptions& o) {
  auto list = etcd::parse_endpoints(o.endpoint);
  if (!o.etcd_protocol.empty())
    for (auto& e : list)
      if (e.find("://") == std::string::npos) e = o.etcd_protocol + "://" + e;
  return list;
}

// Who this agent is to etcd: etcdctl's variables, with torchrun's --rdzv-conf files in place.
etcd::Credentials credentials(const RendezvousOptions& o) {
  auto c = etcd::Credentials::from_env();
  for (auto [field, given] : {std::pair{&c.ca_cert, &o.etcd_cacert}, {&c.cert, &o.etcd_cert}, {&c.key, &o.etcd_key}})
    if (!given->empty()) *field = *given;
  return c;
}

}  // namespace

EtcdRendezvous::EtcdRendezvous(const JobPlan& plan, const RendezvousOptions& options, SignalWatch& signals)
    : ElasticRendezvous(plan, options, signals, StoreOpenedByKind{}) {
  auto store = std::make_unique<etcd::EtcdStore>(endpoints(opt_), opt_.secret, kEtcdCallTimeout, kLeaseSeconds,
                                                 credentials(opt_));
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
    throw TimeoutError("rendezvous: etcd at " + opt_.endpoint + " did not answer: " + e.what());
  }
  // This host's address on the path to etcd: where the other nodes reach its workers.
  bind_ip_ = etcd_->local_address();
  workers_port_ = choose_workers_port(bind_ip_, opt_.workers_port, opt_.hand_socket, workers_socket_);
  store_->set(key("node/" + std::to_string(id_)), std::to_string(plan_.nproc_per_node) + " " + host_ + " " + bind_ip_ +
                                                      " " + std::to_string(workers_port_));
  store_->set_timeout(kRequestTimeout);
}

void EtcdRendezvous::form_round(int round, Clock::time_point deadline) {
  const std::string plan_key = key(round, "plan");
  while (Clock::now() < deadline) {
    if (store_->check({plan_key})) return;
    if (etcd_->claim_if_absent(key(round, "closer"), std::to_string(id_))) {
      store_->add(key("round"), round - store_->add(key("round"), 0));
      RoundPlan p = close_round(round, deadline);
      // The workers' store is served by node rank 0's agent, on its own port.
      p.port = uint16_t(to_int(member_entry(p.ids.at(0))[3], 1, 65535));
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

void EtcdRendezvous::place_workers(Assignment& a, const RoundPlan& p) {
  a.master_addr = member_entry(p.ids.at(0))[2];
  a.listen_fd = a.node_rank == 0 ? workers_socket_.fd() : -1;
}

std::vector<std::string> EtcdRendezvous::member_entry(int id) {
  std::istringstream node(store_->get(key("node/" + std::to_string(id))));
  std::vector<std::string> words;
  for (std::string w; node >> w;) words.push_back(w);
  if (words.size() != 4) throw StoreError("rendezvous: malformed entry of agent " + std::to_string(id));
  return words;
}

int64_t EtcdRendezvous::claims_lost() { return etcd_->changes_under(key("alive/")); }

std::string EtcdRendezvous::claim_lost_cause() const {
  return "its distrun agent's lease in etcd lapsed (it died, froze, or its host is unreachable)";
}

FailureRecord EtcdRendezvous::store_lost(const std::exception& e) const {
  FailureRecord r;
  r.final = true;
  r.host = "etcd";
  r.node_rank = -1;
  r.cause = "the etcd cluster at " + opt_.endpoint + " stopped answering: " + e.what();
  return r;
}

bool EtcdRendezvous::record_first(int attempt, const FailureRecord& mine) {
  return etcd_->set_if_absent(key(attempt, "failed"), mine.encode());
}

std::vector<int> EtcdRendezvous::readers(int attempt) const {
  return members_attempt_ == attempt ? members_ : std::vector<int>{};
}

std::optional<FailureRecord> EtcdRendezvous::first_failure(int attempt) {
  if (!store_alive_) return std::nullopt;
  try {
    // A member whose lease lapsed (its agent died, or its host is gone) reads nothing.
    for (int id : readers(attempt))
      if (id != id_ && !store_->check({key("alive/" + std::to_string(id))})) vanished_.insert(id);
    wait_for_readers(attempt, "seen", opt_.stop_grace + kLinger);
    const std::string failed = key(attempt, "failed"), settled = key(attempt, "settled");
    if (!store_->check({failed})) return std::nullopt;
    etcd_->set_if_absent(settled, store_->get(failed));
    return FailureRecord::decode(store_->get(settled));
  } catch (const Error&) {
    // Lost, or unreadable: the record read before stands.
  }
  return std::nullopt;
}

std::string EtcdRendezvous::where() const { return "etcd " + opt_.endpoint; }

}  // namespace distrun::launcher
