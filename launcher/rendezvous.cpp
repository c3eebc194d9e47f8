#include "rendezvous.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <thread>

#include "distrun/env/netif.hpp"
#include "distrun/store/tcp_store.hpp"
#include "rendezvous_detail.hpp"
#include "signal_names.hpp"

namespace distrun::launcher {

using namespace rendezvous_detail;

namespace {

std::string hostname() {
  char buf[256] = {};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

}  // namespace

Rendezvous::Rendezvous(const JobPlan& plan, const RendezvousOptions& options, SignalWatch& signals)
    : plan_(plan), opt_(options), signals_(signals), host_(hostname()), node_rank_(plan.node_rank) {
  // Where node 0 listens: the address of --master-addr on this host, so the store is not
  // offered on every interface (the user may ask for that with --rdzv-bind-all).
  // One node: every worker is on this host and reaches the workers' store on loopback
  // (ProcessGroup::init does the same), so nothing outside the host can.
  if (plan_.single_node()) {
    bind_ip_ = "127.0.0.1";
    return;
  }
  if (!opt_.etcd_endpoints.empty()) {
    open_etcd_store();
    return;
  }
  std::string master_ip = resolve_host(plan_.master_addr.empty() ? "127.0.0.1" : plan_.master_addr);
  bool master_is_here = is_local_address(master_ip);
  id_ = plan_.node_rank;
  if (plan_.elastic()) {
    open_elastic_store(master_ip, Clock::now() + opt_.timeout);
    store_->set_timeout(kRequestTimeout);
    return;
  }
  if (plan_.node_rank == 0) {
    if (!master_is_here && !opt_.bind_all)
      throw ConfigError("--master-addr " + plan_.master_addr + " (" + master_ip +
                        ") is not an address of this host, but node 0 hosts the rendezvous there: give node 0's "
                        "own address, or --rdzv-bind-all to listen on every interface");
    bind_ip_ = opt_.bind_all ? "0.0.0.0" : master_ip;
  }
  hosts_.assign(size_t(plan_.nnodes), "");
  hosts_[0] = plan_.master_addr;
  TCPStoreOptions so;
  so.secret = opt_.secret;
  const auto deadline = Clock::now() + opt_.timeout;
  if (plan_.node_rank == 0) {
    so.is_server = true;
    so.timeout = opt_.timeout;
    // Bound here first, so a taken port is a PortInUse (a ConfigError: exit 2), as on one node.
    try {
      so.listen_fd = BoundPort(bind_ip_, *plan_.master_port).release();
    } catch (const PortInUse& e) {
      throw PortInUse("rendezvous: node 0 cannot host it on --master-port " + where(plan_) + ": " + e.what());
    }
    store_ = std::make_unique<TCPStore>(plan_.master_addr, *plan_.master_port, so);
    store_->set(key("nnodes"), std::to_string(plan_.nnodes));  // each node checks its own against it
    // The workers' store port: bound now and held, or (for programs that bind it themselves)
    // chosen now; the same for every attempt.
    choose_workers_port(opt_.workers_port);
  } else {
    connect_to_store(deadline);
  }
  store_->set_timeout(kRequestTimeout);
}

void Rendezvous::connect_to_store(Clock::time_point deadline) {
  TCPStoreOptions so;
  so.secret = opt_.secret;
  so.keep_on_timeout = true;  // through a network blip, up to the heartbeat timeout (watch())
  // Connects in short tries, so a signal stops the wait at once.
  so.timeout = milliseconds(1000);
  for (;;) {
    try {
      auto store = std::make_unique<TCPStore>(plan_.master_addr, *plan_.master_port, so);
      // Held while this agent's connection lives: node 0 sees it go at once when it dies.
      if (id_ > 0) store->claim(key("alive/" + std::to_string(id_)), "1");
      store_ = std::move(store);
      return;
    } catch (const TimeoutError& e) {
      if (int sig = signals_.next_stop()) throw Interrupted(sig);
      if (Clock::now() >= deadline)
        throw TimeoutError("rendezvous: node 0 at " + where(plan_) + " did not answer within " + secs(opt_.timeout) +
                           " (is node 0 started?): " + e.what());
    } catch (const StoreError& e) {
      throw StoreError("rendezvous: node 0 at " + where(plan_) + " dropped this agent (" + e.what() +
                       "); is the job secret (DISTRUN_STORE_SECRET or --rdzv-secret-file) the same on every node?");
    }
  }
}

Rendezvous::~Rendezvous() = default;

std::string Rendezvous::key(int attempt, const std::string& name) const {
  return "distrun/rdzv/" + plan_.run_id + "/" + std::to_string(attempt) + "/" + name;
}

std::string Rendezvous::key(const std::string& name) const { return "distrun/rdzv/" + plan_.run_id + "/" + name; }

FailureRecord Rendezvous::store_lost(const std::exception& e) const {
  if (etcd_) return etcd_lost(e);
  FailureRecord r;
  r.final = true;
  r.host = hosts_.empty() ? plan_.master_addr : hosts_[0];
  r.node_rank = 0;
  r.cause = dynamic_cast<const TimeoutError*>(&e)
                ? "the rendezvous store on node 0 stopped answering for the heartbeat timeout (" +
                      secs(opt_.heartbeat_timeout) + ": its agent is frozen, or its host unreachable): " + e.what()
                : std::string(
                      "the rendezvous store on node 0 stopped answering (its agent died, or its host closed the "
                      "connection): ") +
                      e.what();
  return r;
}

void Rendezvous::check_signal(int attempt, const std::string& during) {
  int sig = signals_.next_stop();
  if (!sig) return;
  FailureRecord mine;
  mine.final = true;
  mine.host = host_;
  mine.node_rank = node_rank_;
  mine.cause = "distrun stopped by " + signal_abbrev(sig) + " " + during;
  if (plan_.elastic() && !elastic_host_) {
    // An elastic node may leave: it is left out of the rounds still to close, and only a
    // round it is a member of ends (restartable when MIN nodes remain).
    try {
      if (id_ > 0) store_->set(key("left/" + std::to_string(id_)), "1");
    } catch (const Error&) {
    }
    if (members_attempt_ != attempt) throw Interrupted(sig);
    mine.final = int(members_.size()) - 1 < plan_.min_nodes;
  }
  // This agent leaves at once, without acknowledge(): node 0 need not wait for it.
  if (store_ && store_alive_) try {
      store_->set(key(attempt, "seen/" + std::to_string(id_)), "1");
    } catch (const Error&) {
    }
  report_failure(attempt, mine);
  throw Interrupted(sig);
}

void Rendezvous::wait_keys(int attempt, const std::vector<std::string>& keys, Clock::time_point deadline) {
  for (;;) {
    check_signal(attempt, "while the nodes met");
    try {
      store_->wait(keys, kSlice);
      return;
    } catch (const TimeoutError&) {
    }
    if (plan_.elastic()) check_closed();
    if (store_->check({key(attempt, "failed")}))
      throw JobFailed(FailureRecord::decode(store_->get(key(attempt, "failed"))));
    if (Clock::now() >= deadline) throw TimeoutError("rendezvous: deadline");
  }
}

Assignment Rendezvous::single_node(int attempt) {
  Assignment a;
  a.round = attempt;
  a.world_size = plan_.nproc_per_node;
  a.master_addr = plan_.master_addr.empty() ? "127.0.0.1" : plan_.master_addr;
  // Chosen once: an explicit port, or a free one, stays the same across restarts.
  if (attempt == 0) {
    choose_workers_port(plan_.master_port);
  }
  a.master_port = workers_port_;
  a.listen_fd = workers_socket_.fd();
  a.secret = random_hex(16);
  return a;
}

Assignment Rendezvous::join(int attempt) {
  if (!store_) return single_node(attempt);
  if (plan_.elastic()) return join_round(attempt);
  const int k = plan_.node_rank;
  const auto deadline = Clock::now() + opt_.timeout;
  Assignment a;
  a.round = attempt;
  a.node_rank = k;
  a.nnodes = plan_.nnodes;
  a.master_addr = plan_.master_addr;
  PlanText p;
  try {
    if (attempt == 0 && k != 0) check_same_nnodes(deadline);
    if (attempt == 0 && store_->add(key("claim/" + std::to_string(k)), 1) > 1)
      throw ConfigError("rendezvous: two agents claim --node-rank " + std::to_string(k));
    store_->set(key(attempt, "node/" + std::to_string(k)),
                NodeEntry{plan_.nproc_per_node, opt_.results_given, host_}.encode());

    if (k == 0) {
      std::vector<std::string> keys;
      for (int n = 0; n < plan_.nnodes; ++n) keys.push_back(key(attempt, "node/" + std::to_string(n)));
      try {
        wait_keys(attempt, keys, deadline);
      } catch (const TimeoutError&) {
        std::string missing;
        for (int n = 0; n < plan_.nnodes; ++n)
          if (!store_->check({keys[n]})) missing += (missing.empty() ? "" : ", ") + std::to_string(n);
        std::string why = "node(s) " + missing + " of " + std::to_string(plan_.nnodes) + " never joined at " +
                          where(plan_) + " within " + secs(opt_.timeout);
        FailureRecord r{true, host_, 0, -1, "rendezvous: " + why};
        report_failure(attempt, r);
        throw TimeoutError("rendezvous: " + why);
      }
      PlanText plan;
      plan.port = workers_port_;
      plan.salt = random_hex(16);
      std::string with, without;
      for (int n = 0; n < plan_.nnodes; ++n) {
        NodeEntry node = NodeEntry::decode(store_->get(keys[size_t(n)]));
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
      const std::string plan_text = plan.encode();
      store_->set(key(attempt, "plan"), plan_text);
    }
    try {
      wait_keys(attempt, {key(attempt, "plan")}, deadline);
    } catch (const TimeoutError&) {
      throw TimeoutError("rendezvous: no plan from node 0 at " + where(plan_) + " within " + secs(opt_.timeout) +
                         " (some node never joined)");
    }
    p = parse_plan(store_->get(key(attempt, "plan")), plan_.nnodes);
    if (k != 0) store_->set(key(attempt, "got/" + std::to_string(k)), "1");
    if (p.refused && k == 0) {
      std::vector<std::string> got;
      for (int n = 1; n < plan_.nnodes; ++n) got.push_back(key(attempt, "got/" + std::to_string(n)));
      try {
        store_->wait(got, kLinger);
      } catch (const TimeoutError&) {
      }
    }
  } catch (const MalformedMessage&) {
    throw;  // the store answered: it is not lost
  } catch (const StoreError& e) {
    if (k == 0) throw;
    throw JobFailed(store_lost(e));
  }
  if (p.refused) throw ConfigError("rendezvous: " + p.message);
  a.master_port = p.port;
  a.secret = workers_secret(opt_.secret, p.salt, plan_.run_id, attempt);
  a.listen_fd = k == 0 ? workers_socket_.fd() : -1;
  a.world_size = 0;
  for (int n = 0; n < plan_.nnodes; ++n) {
    if (n < k) a.rank_offset += p.nproc[size_t(n)];
    a.world_size += p.nproc[size_t(n)];
  }
  std::vector<int> ids;
  for (int n = 0; n < plan_.nnodes; ++n) ids.push_back(n);
  set_members(attempt, ids, p.hosts);
  nproc_ = p.nproc;
  last_watch_ = Clock::now();
  return a;
}

void tell_node0_cannot_join(const JobPlan& plan, RendezvousOptions options, SignalWatch& signals,
                            const std::string& why) {
  if (plan.single_node() || plan.elastic() || plan.node_rank == 0 || options.secret.empty()) return;
  options.timeout = std::min(options.timeout, milliseconds(5000));
  try {
    Rendezvous r(plan, options, signals);
    r.report_failure(0, FailureRecord{true, r.host(), plan.node_rank, -1, "cannot join the job: " + why});
  } catch (const std::exception&) {
    // Node 0 not reachable in time: it ends at its rendezvous timeout, naming this node.
  }
}

void Rendezvous::check_same_nnodes(Clock::time_point deadline) {
  wait_keys(0, {key("nnodes")}, deadline);
  const std::string theirs = store_->get(key("nnodes"));
  if (theirs == std::to_string(plan_.nnodes)) return;
  // Said to node 0 too (a final failure), so that every node names it at once.
  const std::string why = "--nnodes " + std::to_string(plan_.nnodes) + " on node " + std::to_string(plan_.node_rank) +
                          " but " + theirs.substr(0, 16) + " on node 0: give the same --nnodes on every node";
  report_failure(0, FailureRecord{true, host_, plan_.node_rank, -1, "rendezvous: " + why});
  throw ConfigError("rendezvous: " + why);
}

void Rendezvous::set_members(int attempt, std::vector<int> ids, std::vector<std::string> hosts) {
  members_ = std::move(ids);
  hosts_ = std::move(hosts);
  members_attempt_ = attempt;
  beats_.assign(members_.size(), -1);
  beat_seen_.assign(members_.size(), Clock::now());
}

FailureRecord Rendezvous::report_failure(int attempt, const FailureRecord& mine) {
  if (!store_ || !store_alive_) return mine;
  try {
    FailureRecord first = mine;
    if (store_->add(key(attempt, "failclaim"), 1) == 1) {
      store_->set(key(attempt, "failed"), mine.encode());
    } else {
      // Another node claimed first; its record follows at once.
      store_->wait({key(attempt, "failed")}, kLinger);
      first = FailureRecord::decode(store_->get(key(attempt, "failed")));
    }
    // A final failure also ends what nodes still waiting for a later round wait for.
    if (plan_.elastic() && first.final) store_->set(key("closed"), first.encode());
    return first;
  } catch (const Error&) {
    store_alive_ = false;
    return mine;
  }
}

std::optional<FailureRecord> Rendezvous::watch(int attempt, bool admit) {
  if (!store_) return std::nullopt;
  if (!store_alive_) return std::nullopt;
  const bool host = hosts_store();
  try {
    if (!host) store_->add(key("beat/" + std::to_string(id_)), 1);
    last_answer_ = Clock::now();
    if (store_->check({key(attempt, "failed")})) return FailureRecord::decode(store_->get(key(attempt, "failed")));
    if (host || etcd_) {
      auto now = Clock::now();
      // Back from a freeze longer than the heartbeat timeout: the others' silence meanwhile
      // says nothing about them, so each gets a fresh timeout. If they gave up on this
      // agent's store, their silence goes on and names them, with a word on why.
      if (last_watch_ != Clock::time_point{} && now - last_watch_ > opt_.heartbeat_timeout) {
        was_frozen_ = std::chrono::duration_cast<milliseconds>(now - last_watch_);
        for (auto& t : beat_seen_) t = now;
      }
      last_watch_ = now;
      for (size_t m = 0; m < members_.size(); ++m) {
        if (members_[m] == id_) continue;
        const std::string id = std::to_string(members_[m]);
        std::string cause;
        int64_t b = store_->add(key("beat/" + id), 0);
        if (b != beats_[m]) {
          beats_[m] = b;
          beat_seen_[m] = now;
        }
        // Its connection closed (the agent died, or its host reset it) without a goodbye: at
        // once. Silence (a frozen agent, a link down) only after the heartbeat timeout, since
        // a network blip heals and the connection with it.
        if (!store_->check({key("alive/" + id)}) && !store_->check({key(attempt, "ack/" + id)}) &&
            !store_->check({key(attempt, "seen/" + id)}))
          cause = etcd_
                      ? "its distrun agent's lease in etcd lapsed (it died, froze, or its host is unreachable)"
                      : "its distrun agent closed its connection to node 0 (it died, or its host reset the connection)";
        else if (now - beat_seen_[m] > opt_.heartbeat_timeout)
          cause = "its distrun agent stopped answering (no heartbeat for " +
                  std::to_string(opt_.heartbeat_timeout.count() / 1000) +
                  " s, the heartbeat timeout): frozen, or the host is unreachable";
        if (!cause.empty()) {
          vanished_.insert(members_[m]);
          // Elastic: a membership change; the others go on in a new round while MIN remain.
          bool final = !plan_.elastic() || int(members_.size()) - 1 < plan_.min_nodes;
          FailureRecord r{final, hosts_[m], int(m), -1, cause};
          if (was_frozen_.count()) {
            // The first failure was this agent's own stall: the other node only gave up on it.
            char took[32];
            std::snprintf(took, sizeof took, "%.1f", double(was_frozen_.count()) / 1000);
            r = FailureRecord{true, host_, 0, -1,
                              std::string("node 0's own agent had not run for ") + took +
                                  " s (stopped or stalled), longer than the heartbeat timeout, so node " +
                                  std::to_string(m) + " (host " + hosts_[m] + ") gave up on its store: " + cause};
          }
          if (plan_.elastic() && final)
            r.cause += "; fewer than " + std::to_string(plan_.min_nodes) + " nodes (--nnodes MIN) remain";
          return report_failure(attempt, r);
        }
      }
      // torchrun's agents ask num_nodes_waiting() at each monitor interval: a node that
      // joined the next round restarts this one with it.
      if (plan_.elastic() && admit) {
        if (auto newcomer = waiting_node(attempt + 1)) {
          FailureRecord r{false, *newcomer, -1, -1,
                          "asked to join: the nodes restart with it (membership change, not counted as a restart)"};
          r.joining = true;
          return report_failure(attempt, r);
        }
      }
    }
  } catch (const TimeoutError& e) {
    if (host) throw;
    // No answer yet: the connection is kept (a blip heals), until the heartbeat timeout.
    if (Clock::now() - last_answer_ < opt_.heartbeat_timeout) return std::nullopt;
    store_alive_ = false;
    return store_lost(e);
  } catch (const MalformedMessage& e) {
    // A failure was recorded, but not as this version writes it: still the job's end.
    return FailureRecord{true, "?", 0, -1,
                         std::string("another agent recorded a failure this one cannot read (") + e.what() +
                             "; is every node's distrun the same version?)"};
  } catch (const Error& e) {
    if (host) throw;  // our own store, in this process: cannot be lost
    store_alive_ = false;
    return store_lost(e);
  }
  return std::nullopt;
}

std::optional<FailureRecord> Rendezvous::finish(int attempt) {
  if (!store_) return std::nullopt;
  const int k = node_rank_;
  const auto deadline = Clock::now() + opt_.timeout;
  bool counted = false;
  while (Clock::now() < deadline) {
    check_signal(attempt, "while waiting for the other nodes to finish");
    if (auto r = watch(attempt, false)) return r;
    try {
      // Counted once: a request without a reply in time still reaches node 0 on the kept
      // connection, so it is not sent again.
      if (!counted) {
        counted = true;
        store_->add(key(attempt, "done"), 1);
      }
      if (store_->add(key(attempt, "done"), 0) >= int64_t(members_.size())) {
        if (!hosts_store()) {
          if (etcd_) store_->set(key("closed"), "ok");  // no host to say it: the first done does
          store_->set(key(attempt, "ack/" + std::to_string(id_)), "1");
          return std::nullopt;
        }
        if (plan_.elastic()) store_->set(key("closed"), "ok");
        // Node 0 hosts the store: it stays until the others have read that all is done.
        std::vector<std::string> acks;
        for (size_t m = 1; m < members_.size(); ++m) acks.push_back(key(attempt, "ack/" + std::to_string(members_[m])));
        try {
          store_->wait(acks, kLinger);
        } catch (const TimeoutError&) {
        }
        return std::nullopt;
      }
    } catch (const TimeoutError& e) {
      // A blip, perhaps: tolerated as in watch(), up to the heartbeat timeout.
      if (hosts_store()) throw;
      if (Clock::now() - last_answer_ >= opt_.heartbeat_timeout) {
        store_alive_ = false;
        return store_lost(e);
      }
    } catch (const StoreError& e) {
      if (hosts_store()) throw;
      store_alive_ = false;
      return store_lost(e);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  FailureRecord r{true, host_, k, -1,
                  "not every node finished attempt " + std::to_string(attempt) + " within " + secs(opt_.timeout)};
  return report_failure(attempt, r);
}

void Rendezvous::acknowledge(int attempt) {
  if (!store_ || !store_alive_) return;
  try {
    if (!hosts_store()) {
      store_->set(key(attempt, "seen/" + std::to_string(id_)), "1");
      return;
    }
    std::vector<std::string> seen;
    // Only nodes that joined this attempt and did not vanish can read it.
    if (plan_.elastic()) {
      if (members_attempt_ == attempt)
        for (size_t m = 1; m < members_.size(); ++m)
          if (!vanished_.count(members_[m])) seen.push_back(key(attempt, "seen/" + std::to_string(members_[m])));
    } else {
      for (int n = 1; n < plan_.nnodes; ++n)
        if (!vanished_.count(n) && store_->check({key(attempt, "node/" + std::to_string(n))}))
          seen.push_back(key(attempt, "seen/" + std::to_string(n)));
    }
    // The others read it after stopping their workers (up to their stop grace).
    if (!seen.empty()) store_->wait(seen, opt_.stop_grace + kLinger);
  } catch (const Error&) {
    // Bounded on purpose: a node that never reads it has lost the store and says so itself.
  }
}

void Rendezvous::close(const std::optional<FailureRecord>& failure) {
  if (!store_ || !store_alive_ || !plan_.elastic()) return;
  try {
    store_->set(key("closed"), failure ? failure->encode() : "ok");
  } catch (const Error&) {
    // The store is gone: a waiting node then loses it and says so itself.
  }
}

void Rendezvous::publish(int attempt, const std::string& name, const std::string& text) {
  if (!store_ || !store_alive_) return;
  try {
    store_->set(key(attempt, name + "/" + std::to_string(id_)), text);
  } catch (const Error&) {
    // Whoever gathers it says that this node sent nothing.
  }
}

std::vector<std::optional<std::string>> Rendezvous::gather(int attempt, const std::string& name, milliseconds within) {
  // Indexed by node rank in this attempt; the keys name agent ids (the same, unless elastic).
  std::vector<std::optional<std::string>> got(members_attempt_ == attempt ? members_.size() : 0);
  if (!store_ || !store_alive_) return got;
  const auto deadline = Clock::now() + within;
  try {
    for (;;) {
      bool waiting = false;
      for (size_t n = 0; n < got.size(); ++n) {
        const int id = members_[n];
        if (id == id_ || got[n] || vanished_.count(id)) continue;
        const std::string k = key(attempt, name + "/" + std::to_string(id));
        if (store_->check({k}))
          got[n] = store_->get(k);
        else
          waiting = true;
      }
      if (!waiting || Clock::now() >= deadline) return got;
      std::this_thread::sleep_for(milliseconds(50));
    }
  } catch (const Error&) {
    store_alive_ = false;  // what came so far is kept
  }
  return got;
}

void Rendezvous::choose_workers_port(std::optional<uint16_t> requested) {
  if (opt_.hand_socket) {
    workers_socket_ = BoundPort(bind_ip_, requested.value_or(0));
    workers_port_ = workers_socket_.port();
  } else if (requested) {
    BoundPort probe(bind_ip_, *requested);  // ConfigError now when taken
    workers_port_ = *requested;
  } else {
    workers_port_ = pick_free_port(bind_ip_);
  }
}

}  // namespace distrun::launcher
