// Elastic rounds (--nnodes MIN:MAX), as torch's c10d dynamic rendezvous forms them, on the
// same authenticated store as the static rendezvous (store_rendezvous.*). The agent on the host of --master-addr
// (--rdzv-endpoint) hosts the store and is always node rank 0; every other agent takes a
// ticket on arrival (its id for the whole job; ids order the node ranks, so survivors keep
// their order and a newcomer comes last). Keys, under distrun/rdzv/RUN_ID/:
//   elastic            "MIN:MAX", set by the host: a node with other --nnodes is refused
//   ticket, node/ID    the ids taken, and each agent's "NPROC HOST"
//   round              the round being formed or run (where a newcomer starts)
//   R/count, R/slot/I  round R's joins: the I-th to join is agent ID
//   R/plan             round R's members, once closed; R/failed how it ended
//   left/ID            an agent that left while waiting; closed: "ok" or the final failure
// A node that joins after round R was closed is not in its plan; it joins R+1 and waits, and
// the host, seeing R+1's count at its monitor interval, ends R (torchrun's
// num_nodes_waiting()), so every live node meets again in R+1.
#include "elastic.hpp"

#include <algorithm>
#include <iostream>
#include <sstream>
#include <thread>

#include "distrun/env/netif.hpp"
#include "distrun/store/tcp_store.hpp"
#include "detail.hpp"

namespace distrun::launcher {

using namespace rendezvous_detail;

namespace {

constexpr milliseconds kPoll{50};  // how often the host counts the joins while a round is open

}  // namespace

std::string RoundPlan::encode() const {
  std::ostringstream out;
  out << "round\n" << port << "\n" << salt << "\n" << restart_count;
  for (size_t m = 0; m < ids.size(); ++m) out << "\n" << ids[m] << " " << nproc[m] << " " << hosts[m];
  return out.str();
}

RoundPlan parse_round_plan(const std::string& text) {
  auto lines = split_lines(text);
  if (lines.size() < 5 || lines[0] != "round") throw StoreError("rendezvous: malformed round plan");
  RoundPlan p;
  try {
    p.port = uint16_t(to_int(lines[1], 1, 65535));
    p.salt = lines[2];
    if (p.salt.empty() || p.salt.size() > 256) throw StoreError("bad salt");
    p.restart_count = to_int(lines[3], 0, 1 << 30);
    for (size_t l = 4; l < lines.size(); ++l) {
      std::istringstream in(lines[l]);
      std::string id, nproc, host;
      if (!(in >> id >> nproc >> host)) throw StoreError("bad member line");
      p.ids.push_back(to_int(id, 0, 1 << 30));
      p.nproc.push_back(to_int(nproc, 1, 1 << 20));
      p.hosts.push_back(host);
      if (p.ids.size() > 1 && p.ids[p.ids.size() - 2] >= p.ids.back()) throw StoreError("members out of order");
    }
  } catch (const StoreError&) {
    throw StoreError("rendezvous: malformed round plan");
  }
  return p;
}

ElasticRendezvous::ElasticRendezvous(const JobPlan& plan, const RendezvousOptions& options, SignalWatch& signals)
    : StoreRendezvous(plan, options, signals) {
  open_store(resolve_host(plan_.master_addr.empty() ? "127.0.0.1" : plan_.master_addr), Clock::now() + opt_.timeout);
  store_->set_timeout(kRequestTimeout);
}

ElasticRendezvous::ElasticRendezvous(const JobPlan& plan, const RendezvousOptions& options, SignalWatch& signals,
                                     StoreOpenedByKind)
    : StoreRendezvous(plan, options, signals) {}

void ElasticRendezvous::open_store(const std::string& master_ip, Clock::time_point deadline) {
  if (is_local_address(master_ip)) {
    // As torchrun's c10d backend: the agent on the endpoint's host serves the store; a second
    // agent on that host finds the port bound and joins as a client.
    bind_ip_ = opt_.bind_all ? "0.0.0.0" : master_ip;
    std::optional<BoundPort> port;
    try {
      port.emplace(bind_ip_, *plan_.master_port);
    } catch (const PortInUse&) {
    }
    if (port) {
      TCPStoreOptions so;
      so.secret = opt_.secret;
      so.is_server = true;
      so.max_connections = so.max_unauthenticated = store_connections(plan_);
      so.bind_host = bind_ip_;
      so.listen_fd = port->release();
      so.timeout = opt_.timeout;
      auto store = std::make_unique<TCPStore>(plan_.master_addr, *plan_.master_port, so);
      tcp_store_ = store.get();
      store_ = std::move(store);
      hosts_store_ = true;
      id_ = 0;
      store_->set(key("node/0"), std::to_string(plan_.nproc_per_node) + " " + host_);
      store_->set(key("elastic"), elastic_range(plan_));
      workers_port_ = choose_workers_port(bind_ip_, opt_.workers_port, opt_.hand_socket, workers_socket_);
      return;
    }
  }
  id_ = -1;  // no ticket yet: nothing to leave if a signal comes first
  connect_to_store(deadline);
  store_->set_timeout(kRequestTimeout);
  take_ticket(deadline);
}

void ElasticRendezvous::take_ticket(Clock::time_point deadline) {
  try {
    wait_keys(0, {key("elastic")}, deadline);
  } catch (const TimeoutError&) {
    throw ConfigError("rendezvous: the agent at " + where() + " runs no elastic job (is --nnodes " +
                      elastic_range(plan_) + " given on every node?)");
  }
  std::string theirs = store_->get(key("elastic"));
  if (theirs != elastic_range(plan_))
    throw ConfigError("rendezvous: --nnodes " + elastic_range(plan_) + " here, but " + theirs + " on the agent at " +
                      where() + ": give the same range on every node");
  id_ = int(store_->add(key("ticket"), 1));
  tcp_store_->claim(key("alive/" + std::to_string(id_)), "1", key("claims_lost"));
  store_->set(key("node/" + std::to_string(id_)), std::to_string(plan_.nproc_per_node) + " " + host_);
}

void ElasticRendezvous::check_closed() {
  if (!store_->check({key("closed")})) return;
  std::string closed = store_->get(key("closed"));
  if (closed == "ok")
    throw JobEndedWithoutUs("the elastic job at " + where() + " finished before this node was admitted to a round");
  throw JobFailed(FailureRecord::decode(closed));
}

void ElasticRendezvous::mark_closed(const std::string& text) { store_->set(key("closed"), text); }

Assignment ElasticRendezvous::join(int round, int /*restarts*/) {
  const auto deadline = Clock::now() + opt_.timeout;
  try {
    if (first_join_) {
      // A newcomer starts with the round being run; if that one is closed already, the loop
      // below moves it to the next, where it waits to be let in.
      first_join_ = false;
      round = std::max(round, int(store_->add(key("round"), 0)));
    }
    for (;; ++round) {
      if (hosts_store_) store_->add(key("round"), round - store_->add(key("round"), 0));
      int64_t slot = store_->add(key(round, "count"), 1);
      store_->set(key(round, "slot/" + std::to_string(slot)), std::to_string(id_));
      form_round(round, deadline);
      try {
        wait_keys(round, {key(round, "plan")}, deadline);
      } catch (const TimeoutError&) {
        throw TimeoutError("rendezvous: round " + std::to_string(round) + " of the elastic job at " + where() +
                           " did not start within " + secs(opt_.timeout) + " (fewer than " +
                           std::to_string(plan_.min_nodes) + " nodes?)");
      }
      RoundPlan p = parse_round_plan(store_->get(key(round, "plan")));
      auto me = std::find(p.ids.begin(), p.ids.end(), id_);
      if (me == p.ids.end()) continue;  // closed before this node came: it waits in the next
      set_members(round, p.ids, p.hosts);
      Assignment a = share(round, size_t(me - p.ids.begin()), p.nproc, p.port, p.salt);
      a.restart_count = p.restart_count;
      place_workers(a, p);
      // The round, so that a restart for a node that joined (same count) keeps the logs of
      // the round before.
      a.log_attempt = round;
      std::cerr << "distrun: elastic round " << a.round << ": node rank " << a.node_rank << " of " << a.nnodes
                << " nodes, world size " << a.world_size << std::endl;
      return a;
    }
  } catch (const StoreError& e) {
    if (hosts_store_) throw;
    throw JobFailed(store_lost(e));
  }
}

void ElasticRendezvous::form_round(int round, Clock::time_point deadline) {
  if (hosts_store_) store_->set(key(round, "plan"), close_round(round, deadline).encode());
}

bool ElasticRendezvous::leaving_is_final(int attempt) const {
  // The host takes the store with it; any other node leaves a round that goes on while MIN remain.
  return hosts_store_ || members_attempt_ != attempt || int(members_.size()) - 1 < plan_.min_nodes;
}

bool ElasticRendezvous::leave(int attempt, int sig) {
  if (hosts_store_) return true;
  // It is left out of the rounds still to close, and only a round it is a member of ends
  // (restartable when MIN nodes remain).
  try {
    if (id_ > 0) store_->set(key("left/" + std::to_string(id_)), "1");
  } catch (const Error&) {
  }
  if (members_attempt_ != attempt) throw Interrupted(sig);
  return int(members_.size()) - 1 < plan_.min_nodes;
}

std::string ElasticRendezvous::final_loss_note() const {
  return "; fewer than " + std::to_string(plan_.min_nodes) + " nodes (--nnodes MIN) remain";
}

std::string ElasticRendezvous::restart_reason(const FailureRecord& first) const {
  return "node " + first.host + " failed or left";
}

std::optional<FailureRecord> ElasticRendezvous::newcomer(int attempt) {
  auto host = waiting_node(attempt + 1);
  if (!host) return std::nullopt;
  FailureRecord r{false, *host, -1, -1,
                  "asked to join: the nodes restart with it (membership change, not counted as a restart)"};
  r.joining = true;
  return r;
}

std::vector<int> ElasticRendezvous::readers(int attempt) const {
  if (members_attempt_ != attempt) return {};
  return std::vector<int>(members_.begin() + 1, members_.end());
}

std::optional<std::string> ElasticRendezvous::waiting_node(int round) {
  const int64_t joined = store_->add(key(round, "count"), 0);
  for (int64_t i = 1; i <= joined; ++i) {
    const std::string slot = key(round, "slot/" + std::to_string(i));
    if (!store_->check({slot})) return std::string("(a new node)");  // its id follows at once
    const std::string id = store_->get(slot);
    if (store_->check({key("left/" + id)})) continue;  // came and went: no reason to restart
    std::istringstream node(store_->get(key("node/" + id)));
    std::string nproc, host;
    node >> nproc >> host;
    return host;
  }
  return std::nullopt;
}

int ElasticRendezvous::restart_count(int round) {
  if (round == 0 || !store_->check({key(round - 1, "plan")})) return 0;
  int count = parse_round_plan(store_->get(key(round - 1, "plan"))).restart_count;
  if (store_->check({key(round - 1, "failed")}) &&
      !FailureRecord::decode(store_->get(key(round - 1, "failed"))).joining)
    ++count;
  return count;
}

RoundPlan ElasticRendezvous::close_round(int round, Clock::time_point deadline) {
  // Open until MAX joined, or until last_call_timeout after the MIN-th joined (torchrun's
  // last call); fewer than MIN by the rendezvous timeout ends the job.
  std::optional<Clock::time_point> last_call_ends;
  int64_t n = 0;
  for (;;) {
    check_signal(round, "while the nodes met");
    n = store_->add(key(round, "count"), 0);
    const auto now = Clock::now();
    if (n >= plan_.nnodes) break;
    if (n >= plan_.min_nodes) {
      if (!last_call_ends) last_call_ends = now + opt_.last_call;
      if (now >= *last_call_ends) break;
    } else if (now >= deadline) {
      std::string why = "only " + std::to_string(n) + " of at least " + std::to_string(plan_.min_nodes) +
                        " nodes joined round " + std::to_string(round) + " at " + where() + " within " +
                        secs(opt_.timeout);
      report_failure(round, FailureRecord{true, host_, 0, -1, "rendezvous: " + why});
      throw TimeoutError("rendezvous: " + why);
    }
    std::this_thread::sleep_for(kPoll);
  }
  n = std::min<int64_t>(n, plan_.nnodes);

  RoundPlan p;
  p.port = workers_port_;
  p.salt = random_hex(16);
  p.restart_count = restart_count(round);
  struct Member {
    int id, nproc;
    std::string host;
  };
  std::vector<Member> members;
  for (int64_t i = 1; i <= n; ++i) {
    const std::string slot = key(round, "slot/" + std::to_string(i));
    // Written right after its count by the joining agent; one that died in between is left out.
    try {
      store_->wait({slot}, kLinger);
    } catch (const TimeoutError&) {
      continue;
    }
    int id = to_int(store_->get(slot), 0, 1 << 30);
    if (id != id_ && store_->check({key("left/" + std::to_string(id))})) continue;
    std::istringstream node(store_->get(key("node/" + std::to_string(id))));
    std::string nproc, host;
    node >> nproc >> host;
    members.push_back({id, to_int(nproc, 1, 1 << 20), host});
  }
  std::sort(members.begin(), members.end(), [](const Member& a, const Member& b) { return a.id < b.id; });
  for (const Member& m : members) {
    p.ids.push_back(m.id);
    p.nproc.push_back(m.nproc);
    p.hosts.push_back(m.host);
  }
  return p;
}

}  // namespace distrun::launcher
