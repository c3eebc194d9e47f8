#include "static_nodes.hpp"

#include "distrun/env/netif.hpp"
#include "distrun/store/tcp_store.hpp"
#include "detail.hpp"

namespace distrun::launcher {

using namespace rendezvous_detail;

StaticRendezvous::StaticRendezvous(const JobPlan& plan, const RendezvousOptions& options, SignalWatch& signals)
    : StoreRendezvous(plan, options, signals) {
  hosts_store_ = plan_.node_rank == 0;
  hosts_.assign(size_t(plan_.nnodes), "");
  hosts_[0] = plan_.master_addr;
  const std::string master_ip = resolve_host(plan_.master_addr.empty() ? "127.0.0.1" : plan_.master_addr);
  if (!hosts_store_) {
    connect_to_store(Clock::now() + opt_.timeout);
    store_->set_timeout(kRequestTimeout);
    return;
  }
  // Where node 0 listens: the address of --master-addr on this host, so the store is not
  // offered on every interface (the user may ask for that with --rdzv-bind-all).
  if (!is_local_address(master_ip) && !opt_.bind_all)
    throw ConfigError("--master-addr " + plan_.master_addr + " (" + master_ip +
                      ") is not an address of this host, but node 0 hosts the rendezvous there: give node 0's "
                      "own address, or --rdzv-bind-all to listen on every interface");
  bind_ip_ = opt_.bind_all ? "0.0.0.0" : master_ip;
  TCPStoreOptions so;
  so.secret = opt_.secret;
  so.is_server = true;
  so.max_connections = so.max_unauthenticated = store_connections(plan_);
  so.timeout = opt_.timeout;
  // Its own replies come late only when this agent itself did not run (SIGSTOP): taken then.
  so.keep_on_timeout = true;
  // Bound here first, so a taken port is a PortInUse (a ConfigError: exit 2), as on one node.
  try {
    so.listen_fd = BoundPort(bind_ip_, *plan_.master_port).release();
  } catch (const PortInUse& e) {
    throw PortInUse("rendezvous: node 0 cannot host it on --master-port " + where() + ": " + e.what());
  }
  auto store = std::make_unique<TCPStore>(plan_.master_addr, *plan_.master_port, so);
  tcp_store_ = store.get();
  store_ = std::move(store);
  store_->set(key("nnodes"), std::to_string(plan_.nnodes));  // each node checks its own against it
  // The workers' store port: bound now and held, or (for programs that bind it themselves)
  // chosen now; the same for every attempt.
  workers_port_ = choose_workers_port(bind_ip_, opt_.workers_port, opt_.hand_socket, workers_socket_);
  store_->set_timeout(kRequestTimeout);
}

std::string StaticRendezvous::missing_nodes(const std::vector<std::string>& keys) const {
  const auto entries = store_->multi_get(keys);
  std::string missing;
  for (int n = 0; n < plan_.nnodes; ++n)
    if (!entries[size_t(n)]) missing += (missing.empty() ? "" : ", ") + std::to_string(n);
  return missing;
}

std::optional<FailureRecord> StaticRendezvous::node_left(int attempt, const std::vector<std::string>& keys,
                                                         milliseconds stalled) {
  // Every node's entry, claim and goodbye in one request: [entries..., alive/..., seen/...].
  std::vector<std::string> ask(keys.begin() + 1, keys.end());
  for (int n = 1; n < plan_.nnodes; ++n) ask.push_back(key("alive/" + std::to_string(n)));
  for (int n = 1; n < plan_.nnodes; ++n) ask.push_back(key(attempt, "seen/" + std::to_string(n)));
  const auto got = store_->multi_get(ask);
  const size_t others = size_t(plan_.nnodes) - 1;
  for (size_t i = 0; i < others; ++i) {
    // Its connection is its claim; one that joined this attempt and then vanished without a
    // word (a signal leaves a failure record and a "seen") died, or gave up on this node.
    if (!got[i] || got[others + i] || got[2 * others + i]) continue;
    const int n = int(i) + 1;
    const std::string host = NodeEntry::decode(*got[i]).host;
    const std::string cause = "its distrun agent joined, then closed its connection to node 0 during the rendezvous";
    vanished_.insert(n);  // not waited for to read the failure
    return stalled.count() ? own_stall(stalled, n, host, cause) : FailureRecord{true, host, n, -1, cause};
  }
  return std::nullopt;
}

void StaticRendezvous::wait_for_nodes(int attempt, const std::vector<std::string>& keys, Clock::time_point deadline) {
  auto last = Clock::now();
  milliseconds stalled{0};
  for (;;) {
    try {
      wait_keys(attempt, keys, std::min(deadline, Clock::now() + kSlice));
      return;
    } catch (const TimeoutError&) {
      if (Clock::now() >= deadline) throw;
    }
    // A slice that took longer than the heartbeat timeout: this agent did not run meanwhile.
    const auto now = Clock::now();
    if (now - last > opt_.heartbeat_timeout) stalled = std::chrono::duration_cast<milliseconds>(now - last);
    last = now;
    if (auto left = node_left(attempt, keys, stalled)) {
      report_failure(attempt, *left);
      throw JobFailed(*left);
    }
    // A node given another job secret is dropped before it can say who it is; its refusal is
    // all node 0 learns, and enough to end the rendezvous now rather than at its timeout.
    if (auto peer = tcp_store_->wrong_secret_peer()) {
      const std::string missing = missing_nodes(keys);
      const std::string why = "an agent at " + *peer + " proved another job secret and was refused, and node(s) " +
                              missing + " of " + std::to_string(plan_.nnodes) +
                              " have not joined: give every node the same DISTRUN_STORE_SECRET or --rdzv-secret-file";
      report_failure(attempt, FailureRecord{true, host_, 0, -1, "rendezvous: " + why});
      throw ConfigError("rendezvous: " + why);
    }
  }
}

void StaticRendezvous::publish_plan(int attempt, Clock::time_point deadline) {
  std::vector<std::string> keys;
  for (int n = 0; n < plan_.nnodes; ++n) keys.push_back(key(attempt, "node/" + std::to_string(n)));
  try {
    wait_for_nodes(attempt, keys, deadline);
  } catch (const TimeoutError&) {
    const std::string missing = missing_nodes(keys);
    std::string why = "node(s) " + missing + " of " + std::to_string(plan_.nnodes) + " never joined at " + where() +
                      " within " + secs(opt_.timeout);
    report_failure(attempt, FailureRecord{true, host_, 0, -1, "rendezvous: " + why});
    throw TimeoutError("rendezvous: " + why);
  }
  PlanText plan;
  plan.port = workers_port_;
  plan.salt = random_hex(16);
  std::string with, without;
  const auto entries = store_->multi_get(keys);  // all there: waited for above
  for (int n = 0; n < plan_.nnodes; ++n) {
    if (!entries[size_t(n)]) throw StoreError("rendezvous: node " + std::to_string(n) + "'s entry vanished");
    NodeEntry node = NodeEntry::decode(*entries[size_t(n)]);
    plan.nproc.push_back(node.nproc);
    plan.hosts.push_back(node.host);
    std::string& list = node.results_given ? with : without;
    list += (list.empty() ? "" : ", ") + std::to_string(n);
  }
  // Only rank 0 (node 0) writes --results, and only ranks that were given it send their
  // records: refuse a job that would silently lose some.
  if (opt_.scenario && !with.empty() && !without.empty()) {
    plan.refused = true;
    plan.message = "--results was given on node(s) " + with + " but not on node(s) " + without +
                   ": give it on every node (rank 0 on node 0 writes every rank's records) or on none";
  }
  store_->set(key(attempt, "plan"), plan.encode());
}

void StaticRendezvous::linger_for_readers(int attempt) {
  std::vector<std::string> got;
  for (int n = 1; n < plan_.nnodes; ++n) got.push_back(key(attempt, "got/" + std::to_string(n)));
  try {
    store_->wait(got, kLinger);
  } catch (const TimeoutError&) {
  }
}

Assignment StaticRendezvous::join(int attempt, int restarts) {
  const int k = plan_.node_rank;
  const auto deadline = Clock::now() + opt_.timeout;
  PlanText p;
  // While the nodes meet, node 0 may be slow to answer (thousands of agents connecting at
  // once): its silence is judged by the heartbeat timeout, as its listener judges it, not by
  // the run's short request timeout. Its requests are not repeated (a claim counts once).
  if (k != 0) store_->set_timeout(opt_.heartbeat_timeout);
  try {
    if (attempt == 0 && k != 0) check_same_nnodes(deadline);
    if (attempt == 0 && store_->add(key("claim/" + std::to_string(k)), 1) > 1)
      throw ConfigError("rendezvous: two agents claim --node-rank " + std::to_string(k));
    store_->set(key(attempt, "node/" + std::to_string(k)),
                NodeEntry{plan_.nproc_per_node, opt_.results_given, host_}.encode());
    if (k == 0) publish_plan(attempt, deadline);
    try {
      wait_keys(attempt, {key(attempt, "plan")}, deadline);
    } catch (const TimeoutError&) {
      throw TimeoutError("rendezvous: no plan from node 0 at " + where() + " within " + secs(opt_.timeout) +
                         " (some node never joined)");
    }
    p = parse_plan(store_->get(key(attempt, "plan")), plan_.nnodes);
    if (k != 0) store_->set(key(attempt, "got/" + std::to_string(k)), "1");
    if (p.refused && k == 0) linger_for_readers(attempt);
  } catch (const MalformedMessage&) {
    throw;  // the store answered: it is not lost
  } catch (const StoreSilent& e) {
    if (k == 0) throw;
    store_alive_ = false;  // nothing more is said to it
    throw JobFailed(store_lost(e));
  } catch (const StoreError& e) {
    if (k == 0) throw;
    throw JobFailed(store_lost(e));
  }
  store_->set_timeout(kRequestTimeout);
  if (p.refused) throw ConfigError("rendezvous: " + p.message);
  std::vector<int> ids;
  for (int n = 0; n < plan_.nnodes; ++n) ids.push_back(n);
  set_members(attempt, ids, p.hosts);
  Assignment a = share(attempt, size_t(k), p.nproc, p.port, p.salt);
  a.restart_count = restarts;
  a.log_attempt = restarts;
  return a;
}

void StaticRendezvous::refuse(int attempt, const std::string& why) {
  report_failure(attempt, FailureRecord{true, host_, plan_.node_rank, -1, "cannot join the job: " + why});
}

void StaticRendezvous::check_same_nnodes(Clock::time_point deadline) {
  wait_keys(0, {key("nnodes")}, deadline);
  const std::string theirs = store_->get(key("nnodes"));
  if (theirs == std::to_string(plan_.nnodes)) return;
  // Said to node 0 too (a final failure), so that every node names it at once.
  const std::string why = "--nnodes " + std::to_string(plan_.nnodes) + " on node " + std::to_string(plan_.node_rank) +
                          " but " + theirs.substr(0, 16) + " on node 0: give the same --nnodes on every node";
  report_failure(0, FailureRecord{true, host_, plan_.node_rank, -1, "rendezvous: " + why});
  throw ConfigError("rendezvous: " + why);
}

std::vector<int> StaticRendezvous::readers(int attempt) const {
  std::vector<std::string> entries;
  for (int n = 1; n < plan_.nnodes; ++n) entries.push_back(key(attempt, "node/" + std::to_string(n)));
  const auto got = store_->multi_get(entries);
  std::vector<int> ids;
  for (int n = 1; n < plan_.nnodes; ++n)
    if (got[size_t(n) - 1]) ids.push_back(n);
  return ids;
}

}  // namespace distrun::launcher
