#include "store_rendezvous.hpp"

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include "distrun/store/hash_store.hpp"
#include "distrun/store/tcp_store.hpp"
#include "detail.hpp"
#include "signal_names.hpp"

namespace distrun::launcher {

using namespace rendezvous_detail;

StoreRendezvous::StoreRendezvous(const JobPlan& plan, const RendezvousOptions& options, SignalWatch& signals)
    : plan_(plan), opt_(options), signals_(signals), host_(hostname()), node_rank_(plan.node_rank),
      id_(plan.node_rank) {}

// A thread parked on the host's store until every key of one set exists or any key of another
// does (the attempt's failure, the job's end): the store wakes it the moment such a key is
// written. It shares the agent's one connection (and its one handshake), giving way to the
// agent's own requests (TCPStore::wait_any), so node 0 holds one connection per agent.
// Agents asking instead cost the host 40% of a core at a thousand agents during the run, and
// 40 000 requests a second at 4 096 agents waiting for a round's plan (distrun-bench
// control-plane --role rendezvous). Stopped by a failure, it can keep the record as the host
// settles it (or as it stands when that wait ends): an agent held up past the host's bounded
// wait for its readers finds the store gone, and prints what the others printed.
class StoreRendezvous::Listener {
 public:
  enum class State { Idle, Waiting, Done, Stopped, Lost };
  // What to keep once stopped: the record under `record` once `settled` exists (at most `wait`).
  struct Keep {
    std::string record, settled;
    milliseconds wait;
  };

  explicit Listener(TCPStore& store) : store_(store) {}
  ~Listener() { halt(); }
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  // Waits for every key of `all` (in turn), or for any key of `stops`. Each request is held
  // at most `hold`; with `silence`, a store that answers none for that long is lost. A wait
  // still in flight is given up.
  void start(std::vector<std::string> all, std::vector<std::string> stops, milliseconds hold,
             std::optional<milliseconds> silence, std::optional<Keep> keep = std::nullopt) {
    halt();
    halted_ = false;
    set(State::Waiting);
    {
      std::lock_guard<std::mutex> lock(mu_);
      record_.reset();
      first_.reset();
    }
    thread_ = std::thread([this, all = std::move(all), stops = std::move(stops), hold, silence,
                           keep = std::move(keep)] { run(all, stops, hold, silence, keep); });
  }

  State state() {
    std::lock_guard<std::mutex> lock(mu_);
    return state_;
  }
  // Waits up to `within` for the wait to end; the state then.
  State wait_for(milliseconds within) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, within, [&] { return state_ != State::Waiting; });
    return state_;
  }
  // State::Lost: what lost the connection.
  [[noreturn]] void rethrow_lost() {
    std::lock_guard<std::mutex> lock(mu_);
    std::rethrow_exception(lost_);
  }
  // The record kept once stopped (settled, if the host settled it in time).
  std::optional<std::string> record() {
    std::lock_guard<std::mutex> lock(mu_);
    return record_;
  }
  // The record as it stood when the wait stopped (a Keep), before it was settled.
  std::optional<std::string> first() {
    std::lock_guard<std::mutex> lock(mu_);
    return first_;
  }

 private:
  void run(const std::vector<std::string>& all, const std::vector<std::string>& stops, milliseconds hold,
           std::optional<milliseconds> silence, const std::optional<Keep>& keep) {
    // The stops come first: a failure written with the last key is the answer.
    std::vector<std::string> keys = stops;
    auto last_answer = Clock::now();
    for (size_t next = 0; !halted_;) {
      if (next == all.size() && !all.empty()) return set(State::Done);
      keys.resize(stops.size());
      if (next < all.size()) keys.push_back(all[next]);
      try {
        const size_t i = store_.wait_any(keys, hold);
        last_answer = Clock::now();
        if (i < stops.size()) return keep ? keep_record(*keep) : set(State::Stopped);
        ++next;
      } catch (const WaitGaveWay&) {
        // The agent's request first: waits again.
      } catch (const StoreSilent&) {
        if (silence && Clock::now() - last_answer >= *silence) return lose(std::current_exception());
      } catch (const TimeoutError&) {
        last_answer = Clock::now();  // answered: nothing yet
      } catch (const std::exception&) {
        return lose(std::current_exception());
      }
    }
  }
  void keep_record(const Keep& keep) {
    try {
      // The record as it stands, read here so that the agent, told, asks nothing more.
      std::string text = store_.get(keep.record);
      std::lock_guard<std::mutex> lock(mu_);
      first_ = std::move(text);
    } catch (const std::exception&) {
      // The agent reads it itself.
    }
    set(State::Stopped);
    try {
      // Given way to the agent's requests meanwhile, waits again; at the end, the host was held
      // up: the record as it stands.
      for (const auto end = Clock::now() + keep.wait; !halted_ && Clock::now() < end;) try {
          store_.wait_any({keep.settled}, std::chrono::duration_cast<milliseconds>(end - Clock::now()));
          break;
        } catch (const StoreSilent&) {
          throw;
        } catch (const TimeoutError&) {
        }
      std::string text = store_.get(keep.record);
      std::lock_guard<std::mutex> lock(mu_);
      record_ = std::move(text);
    } catch (const std::exception&) {
      // Halted, or the store went first: the agent reads the record itself, or loses it.
    }
  }
  void set(State s) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      state_ = s;
    }
    cv_.notify_all();
  }
  void lose(std::exception_ptr e) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!halted_) lost_ = std::move(e);
      state_ = halted_ ? State::Idle : State::Lost;
    }
    cv_.notify_all();
  }
  // Ends the thread: its wait ends at once, the connection stays.
  void halt() {
    halted_ = true;
    if (thread_.joinable()) {
      store_.interrupt_wait();
      thread_.join();
    }
    set(State::Idle);
  }

  TCPStore& store_;
  std::atomic<bool> halted_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  State state_ = State::Idle;
  std::exception_ptr lost_;
  std::optional<std::string> record_, first_;
  std::thread thread_;
};

StoreRendezvous::~StoreRendezvous() = default;

std::string StoreRendezvous::where() const { return rendezvous_detail::where(plan_); }

void StoreRendezvous::connect_to_store(Clock::time_point deadline) {
  TCPStoreOptions so;
  so.secret = opt_.secret;
  so.keep_on_timeout = true;  // through a network blip, up to the heartbeat timeout (watch())
  // Connects in short tries, so a signal stops the wait at once.
  so.timeout = milliseconds(1000);
  // Node 0's kernel accepts the connection while its agent is stopped or stalled, so the
  // handshake meets silence: that is a failure after the heartbeat timeout, as during the run
  // (a node 0 not started yet refuses the connection, and is waited for up to `deadline`).
  std::optional<Clock::time_point> silent_since;
  for (;;) {
    const auto tried = Clock::now();
    try {
      auto store = std::make_unique<TCPStore>(plan_.master_addr, *plan_.master_port, so);
      // Held while this agent's connection lives: node 0 sees it go at once when it dies.
      if (id_ > 0) store->claim(key("alive/" + std::to_string(id_)), "1", key("claims_lost"));
      listener_ = std::make_unique<Listener>(*store);
      tcp_store_ = store.get();
      store_ = std::move(store);
      return;
    } catch (const StoreSilent& e) {
      if (!silent_since) silent_since = tried;
      if (Clock::now() - *silent_since >= opt_.heartbeat_timeout) throw JobFailed(store_lost(e));
      if (int sig = signals_.next_stop()) throw Interrupted(sig);
    } catch (const TimeoutError& e) {
      silent_since.reset();
      if (int sig = signals_.next_stop()) throw Interrupted(sig);
      if (Clock::now() >= deadline)
        throw TimeoutError("rendezvous: node 0 at " + where() + " did not answer within " + secs(opt_.timeout) +
                           " (is node 0 started?): " + e.what());
    } catch (const StoreError& e) {
      throw StoreError("rendezvous: node 0 at " + where() + " dropped this agent (" + e.what() +
                       "); is the job secret (DISTRUN_STORE_SECRET or --rdzv-secret-file) the same on every node?");
    }
  }
}

std::string StoreRendezvous::key(int attempt, const std::string& name) const {
  return "distrun/rdzv/" + plan_.run_id + "/" + std::to_string(attempt) + "/" + name;
}

std::string StoreRendezvous::key(const std::string& name) const { return "distrun/rdzv/" + plan_.run_id + "/" + name; }

std::string StoreRendezvous::claim_lost_cause() const {
  return "its distrun agent closed its connection to node 0 (it died, or its host reset the connection)";
}

FailureRecord StoreRendezvous::store_lost(const std::exception& e) const {
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

void StoreRendezvous::check_signal(int attempt, const std::string& during) {
  int sig = signals_.next_stop();
  if (!sig) return;
  FailureRecord mine;
  mine.host = host_;
  mine.node_rank = node_rank_;
  mine.cause = "distrun stopped by " + signal_abbrev(sig) + " " + during;
  mine.final = leave(attempt, sig);
  // This agent leaves at once, without acknowledge() or first_failure(): node 0 need not
  // wait for it.
  if (store_ && store_alive_) try {
      store_->set(key(attempt, "seen/" + std::to_string(id_)), "1");
      store_->set(key(attempt, "read/" + std::to_string(id_)), "1");
    } catch (const Error&) {
    }
  report_failure(attempt, mine);
  throw Interrupted(sig);
}

void StoreRendezvous::wait_keys(int attempt, const std::vector<std::string>& keys, Clock::time_point deadline) {
  if (listener_) return listen_for(attempt, keys, deadline);
  for (;;) {
    check_signal(attempt, "while the nodes met");
    try {
      try {
        store_->wait(keys, kSlice);
        last_answer_ = Clock::now();
        return;
      } catch (const StoreSilent&) {
        throw;
      } catch (const TimeoutError&) {
        // Answered: not there yet.
      }
      last_answer_ = Clock::now();
      check_closed();
      if (store_->check({key(attempt, "failed")}))
        throw JobFailed(FailureRecord::decode(store_->get(key(attempt, "failed"))));
    } catch (const StoreSilent& e) {
      // Node 0's store has not answered since last_answer_: it stopped or stalled while the
      // nodes met. (Our own store is silent only while this agent itself was stopped.)
      if (!hosts_store_ && Clock::now() - last_answer_ >= opt_.heartbeat_timeout) {
        store_alive_ = false;
        throw JobFailed(store_lost(e));
      }
    }
    if (Clock::now() >= deadline) throw TimeoutError("rendezvous: deadline");
  }
}

void StoreRendezvous::listen_for(int attempt, const std::vector<std::string>& keys, Clock::time_point deadline) {
  check_signal(attempt, "while the nodes met");
  if (store_->check(keys)) return;  // there already: one request, no hop through the listener
  std::vector<std::string> stops = closing_keys();
  stops.push_back(key(attempt, "failed"));
  // Each wait is held for half the heartbeat timeout, so that node 0's silence (its agent
  // stopped or stalled) is judged within about that timeout, as during the run.
  listener_->start(keys, stops, opt_.heartbeat_timeout / 2, opt_.heartbeat_timeout);
  listener_attempt_ = -1;
  for (;;) {
    check_signal(attempt, "while the nodes met");
    const auto state = listener_->wait_for(kSlice);
    if (state == Listener::State::Done) {
      last_answer_ = Clock::now();
      return;
    }
    if (state == Listener::State::Stopped) {
      last_answer_ = Clock::now();
      check_closed();
      throw JobFailed(FailureRecord::decode(store_->get(key(attempt, "failed"))));
    }
    if (state == Listener::State::Lost) try {
        listener_->rethrow_lost();
      } catch (const StoreSilent& e) {
        store_alive_ = false;
        throw JobFailed(store_lost(e));
      }
    if (Clock::now() >= deadline) throw TimeoutError("rendezvous: deadline");
  }
}

void StoreRendezvous::listen_for_failure(int attempt) {
  if (!listener_ || listener_attempt_ == attempt) return;
  // Held for half the heartbeat timeout at a time (the agent's heartbeats, which have no
  // reply, leave it parked): a host silent for the heartbeat timeout is lost.
  listener_->start({}, {key(attempt, "failed")}, opt_.heartbeat_timeout / 2, opt_.heartbeat_timeout,
                   Listener::Keep{key(attempt, "failed"), key(attempt, "settled"), settle_wait()});
  listener_attempt_ = attempt;
}

void StoreRendezvous::set_members(int attempt, std::vector<int> ids, std::vector<std::string> hosts) {
  members_ = std::move(ids);
  hosts_ = std::move(hosts);
  members_attempt_ = attempt;
  beats_.assign(members_.size(), -1);
  claims_lost_seen_ = -1;  // every claim of the new members is looked at once
  beat_seen_.assign(members_.size(), Clock::now());
  last_watch_ = Clock::now();
  // The meeting is over: from here the listener waits for this attempt's failure.
  listen_for_failure(attempt);
}

Assignment StoreRendezvous::share(int attempt, size_t k, const std::vector<int>& nproc, uint16_t port,
                                  const std::string& salt) {
  Assignment a;
  a.round = attempt;
  a.node_rank = int(k);
  a.nnodes = int(nproc.size());
  a.master_addr = plan_.master_addr;
  a.master_port = port;
  a.secret = workers_secret(opt_.secret, salt, plan_.run_id, attempt);
  a.listen_fd = hosts_store_ ? workers_socket_.fd() : -1;
  a.world_size = 0;
  for (size_t m = 0; m < nproc.size(); ++m) {
    if (m < k) a.rank_offset += nproc[m];
    a.world_size += nproc[m];
  }
  node_rank_ = int(k);
  nproc_ = nproc;
  return a;
}

std::optional<FailureRecord> StoreRendezvous::report_failure(int attempt, const FailureRecord& mine) {
  if (!store_alive_) return kept_failure(attempt).value_or(mine);
  try {
    FailureRecord first = mine;
    if (!record_first(attempt, mine)) {
      // Another node claimed first; its record follows at once.
      store_->wait({key(attempt, "failed")}, kLinger);
      first = FailureRecord::decode(store_->get(key(attempt, "failed")));
      // A worker that failed while one of ours was frozen gave up waiting for it: the frozen
      // one is the cause (the first frozen one, when several nodes find one).
      if (mine.frozen && first.rank >= 0 && !first.frozen && !first.final && !first.joining &&
          store_->add(key(attempt, "frozenclaim"), 1) == 1) {
        store_->set(key(attempt, "failed"), mine.encode());
        first = mine;
      }
    }
    // A final failure also ends what nodes still waiting for a later round wait for.
    if (first.final) mark_closed(first.encode());
    return first;
  } catch (const Error&) {
    store_alive_ = false;
    return kept_failure(attempt).value_or(mine);
  }
}

std::optional<FailureRecord> StoreRendezvous::kept_failure(int attempt) {
  if (!listener_ || listener_attempt_ != attempt) return std::nullopt;
  const auto text = listener_->record();
  if (!text) return std::nullopt;
  try {
    return FailureRecord::decode(*text);
  } catch (const Error&) {
    return std::nullopt;
  }
}

milliseconds StoreRendezvous::settle_wait() const { return 2 * (opt_.stop_grace + kLinger); }

bool StoreRendezvous::record_first(int attempt, const FailureRecord& mine) {
  // The count decides who is first; the record follows from the first at once.
  if (store_->add(key(attempt, "failclaim"), 1) != 1) return false;
  store_->set(key(attempt, "failed"), mine.encode());
  return true;
}

FailureRecord StoreRendezvous::own_stall(milliseconds stalled, int node, const std::string& host,
                                         const std::string& cause) const {
  char took[32];
  std::snprintf(took, sizeof took, "%.1f", double(stalled.count()) / 1000);
  return FailureRecord{true, host_, 0, -1,
                       std::string("node 0's own agent had not run for ") + took +
                           " s (stopped or stalled), longer than the heartbeat timeout, so node " +
                           std::to_string(node) + " (host " + host + ") gave up on its store: " + cause};
}

milliseconds StoreRendezvous::beat_period() const { return opt_.heartbeat_timeout / 8; }

int64_t StoreRendezvous::claims_lost() { return store_->add(key("claims_lost"), 0); }

bool StoreRendezvous::claim_may_be_gone() {
  // The claims themselves are read only when the count moved.
  const int64_t lost = claims_lost();
  if (lost == claims_lost_seen_) return false;
  claims_lost_seen_ = lost;
  return true;
}

std::optional<FailureRecord> StoreRendezvous::check_members(int attempt) {
  auto now = Clock::now();
  // Back from a freeze longer than the heartbeat timeout: the others' silence meanwhile
  // says nothing about them, so each gets a fresh timeout. If they gave up on this
  // agent's store, their silence goes on and names them, with a word on why.
  if (last_watch_ != Clock::time_point{} && now - last_watch_ > opt_.heartbeat_timeout) {
    was_frozen_ = std::chrono::duration_cast<milliseconds>(now - last_watch_);
    for (auto& t : beat_seen_) t = now;
  }
  last_watch_ = now;
  // The counts move once a beat period: read as often, every member's in one request.
  const bool read_beats = now - beats_read_ >= beat_period();
  if (read_beats) beats_read_ = now;
  std::vector<std::string> claims, beats;
  for (int id : members_)
    if (id != id_) {
      claims.push_back(key("alive/" + std::to_string(id)));
      beats.push_back(key("beat/" + std::to_string(id)));
    }
  const auto counts = read_beats ? store_->multi_get(beats) : std::vector<std::optional<std::string>>{};
  // Whose claim is gone (with a goodbye for each: an acknowledgement, a "seen") is looked up
  // only when one may be.
  std::vector<std::optional<std::string>> gone;
  if (!claims.empty() && claim_may_be_gone()) {
    std::vector<std::string> ask = claims;
    for (int id : members_)
      if (id != id_) {
        ask.push_back(key(attempt, "ack/" + std::to_string(id)));
        ask.push_back(key(attempt, "seen/" + std::to_string(id)));
      }
    gone = store_->multi_get(ask);
  }
  for (size_t m = 0, other = 0; m < members_.size(); ++m) {
    if (members_[m] == id_) continue;
    const size_t o = other++;
    std::string cause;
    if (read_beats) {
      const int64_t b = counts[o] ? parse_counter(beats[o], *counts[o]) : 0;
      if (b != beats_[m]) {
        beats_[m] = b;
        beat_seen_[m] = now;
      }
    }
    // Its connection closed (the agent died, or its host reset it) without a goodbye: at
    // once. Silence (a frozen agent, a link down) only after the heartbeat timeout, since
    // a network blip heals and the connection with it.
    if (!gone.empty() && !gone[o] && !gone[claims.size() + 2 * o] && !gone[claims.size() + 2 * o + 1])
      cause = claim_lost_cause();
    else if (now - beat_seen_[m] > opt_.heartbeat_timeout)
      cause = "its distrun agent stopped answering (no heartbeat for " +
              std::to_string(opt_.heartbeat_timeout.count() / 1000) +
              " s, the heartbeat timeout): frozen, or the host is unreachable";
    if (cause.empty()) continue;
    vanished_.insert(members_[m]);
    const bool final = loss_is_final(members_.size());
    FailureRecord r{final, hosts_[m], int(m), -1, cause};
    // The first failure was this agent's own stall: the other node only gave up on it.
    if (was_frozen_.count()) r = own_stall(was_frozen_, int(m), hosts_[m], cause);
    if (final) r.cause += final_loss_note();
    return report_failure(attempt, r);
  }
  return std::nullopt;
}

std::optional<FailureRecord> StoreRendezvous::poll(int attempt, bool admit) {
  if (!store_alive_) return std::nullopt;
  try {
    const auto now = Clock::now();
    if (!hosts_store_ && now - last_beat_ >= beat_period()) {
      if (listener_) {
        tcp_store_->beat(key("beat/" + std::to_string(id_)));  // no reply: the listener stays parked
      } else {
        store_->add(key("beat/" + std::to_string(id_)), 1);
        last_answer_ = Clock::now();
      }
      last_beat_ = now;
    }
    if (listener_) {
      // Told by the host's store the moment the failure is written, instead of asking; a
      // host silent for the heartbeat timeout is lost there.
      listen_for_failure(attempt);
      const auto state = listener_->state();
      if (state == Listener::State::Lost) listener_->rethrow_lost();
      if (state != Listener::State::Stopped) return std::nullopt;
      if (auto first = listener_->first()) return FailureRecord::decode(*first);
    }
    const bool failed = store_->check({key(attempt, "failed")});
    last_answer_ = Clock::now();
    own_store_late_ = false;
    if (failed) return FailureRecord::decode(store_->get(key(attempt, "failed")));
    if (watches_members()) {
      if (auto lost = check_members(attempt)) return lost;
      // torchrun's agents ask num_nodes_waiting() at each monitor interval: a node that
      // joined the next round restarts this one with it.
      if (admit)
        if (auto joining = newcomer(attempt)) return report_failure(attempt, *joining);
    }
  } catch (const TimeoutError& e) {
    if (hosts_store_) {
      // Our own store, in this process, answers in time unless this agent itself was not
      // running (stopped, stalled) while it waited: the next look reads that late answer (and
      // sees the stall). Two looks in a row without an answer are a fault of ours.
      if (own_store_late_) throw;
      own_store_late_ = true;
      return std::nullopt;
    }
    // No answer yet: the connection is kept (a blip heals), until the heartbeat timeout.
    if (Clock::now() - last_answer_ < opt_.heartbeat_timeout) return std::nullopt;
    store_alive_ = false;
    return kept_failure(attempt).value_or(store_lost(e));
  } catch (const MalformedMessage& e) {
    // A failure was recorded, but not as this version writes it: still the job's end.
    return FailureRecord{true, "?", 0, -1,
                         std::string("another agent recorded a failure this one cannot read (") + e.what() +
                             "; is every node's distrun the same version?)"};
  } catch (const Error& e) {
    if (hosts_store_) throw;  // our own store, in this process: cannot be lost
    store_alive_ = false;
    return kept_failure(attempt).value_or(store_lost(e));
  }
  return std::nullopt;
}

std::optional<FailureRecord> StoreRendezvous::finish(int attempt) {
  const auto deadline = Clock::now() + opt_.timeout;
  bool counted = false;
  while (Clock::now() < deadline) {
    check_signal(attempt, "while waiting for the other nodes to finish");
    if (auto r = poll(attempt, false)) return r;
    try {
      // Counted once: a request without a reply in time still reaches node 0 on the kept
      // connection, so it is not sent again.
      if (!counted) {
        counted = true;
        store_->add(key(attempt, "done"), 1);
      }
      if (store_->add(key(attempt, "done"), 0) >= int64_t(members_.size())) {
        if (!hosts_store_) {
          all_finished();
          store_->set(key(attempt, "ack/" + std::to_string(id_)), "1");
          return std::nullopt;
        }
        mark_closed("ok");
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
      if (hosts_store_) throw;
      if (Clock::now() - last_answer_ >= opt_.heartbeat_timeout) {
        store_alive_ = false;
        return store_lost(e);
      }
    } catch (const StoreError& e) {
      if (hosts_store_) throw;
      store_alive_ = false;
      return store_lost(e);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  FailureRecord r{true, host_, node_rank_, -1,
                  "not every node finished attempt " + std::to_string(attempt) + " within " + secs(opt_.timeout)};
  return report_failure(attempt, r);
}

std::optional<FailureRecord> StoreRendezvous::first_failure(int attempt) {
  if (!store_alive_) return kept_failure(attempt);
  try {
    // A node that finds a frozen worker late may still replace the record after another has
    // given up on its flight report, so the host settles it once every reader has read
    // (acknowledge()) and the others wait for that: every node prints the same first failure.
    // The host's waits for the readers are bounded, so theirs is too (etcd, with no host,
    // settles otherwise: EtcdRendezvous::first_failure).
    if (hosts_store_) {
      store_->add(key(attempt, "frozenclaim"), 1);  // a frozen worker found from now on stays second
      store_->set(key(attempt, "settled"), "1");
      wait_for_readers(attempt, "read", kLinger);
    } else {
      try {
        store_->wait({key(attempt, "settled")}, settle_wait());
      } catch (const TimeoutError&) {
        // The host was held up: the record as it stands.
      }
    }
    std::optional<FailureRecord> first;
    if (store_->check({key(attempt, "failed")})) first = FailureRecord::decode(store_->get(key(attempt, "failed")));
    if (!hosts_store_) store_->set(key(attempt, "read/" + std::to_string(id_)), "1");
    return first;
  } catch (const Error&) {
    // Lost, or unreadable: the record kept by the listener, else the one read before.
  }
  return kept_failure(attempt);
}

void StoreRendezvous::wait_for_readers(int attempt, const std::string& name, milliseconds within) {
  std::vector<std::string> keys;
  // Only nodes that joined this attempt and did not vanish can read it.
  for (int id : readers(attempt))
    if (!vanished_.count(id)) keys.push_back(key(attempt, name + "/" + std::to_string(id)));
  try {
    if (!keys.empty()) store_->wait(keys, within);
  } catch (const TimeoutError&) {
    // Bounded on purpose: a node that never reads it has lost the store and says so itself.
  }
}

void StoreRendezvous::acknowledge(int attempt) {
  if (!store_alive_) return;
  try {
    if (!hosts_store_) {
      store_->set(key(attempt, "seen/" + std::to_string(id_)), "1");
      return;
    }
    // The others read it after stopping their workers (up to their stop grace).
    wait_for_readers(attempt, "seen", opt_.stop_grace + kLinger);
  } catch (const Error&) {
    // Not the host, and the store is lost: its next look at it says so.
  }
}

void StoreRendezvous::close(const std::optional<FailureRecord>& failure) {
  if (!store_alive_) return;
  try {
    mark_closed(failure ? failure->encode() : "ok");
  } catch (const Error&) {
    // The store is gone: a waiting node then loses it and says so itself.
  }
}

void StoreRendezvous::publish(int attempt, const std::string& name, const std::string& text) {
  if (!store_alive_) return;
  try {
    store_->set(key(attempt, name + "/" + std::to_string(id_)), text);
  } catch (const Error&) {
    // Whoever gathers it says that this node sent nothing.
  }
}

std::vector<std::optional<std::string>> StoreRendezvous::gather(int attempt, const std::string& name,
                                                                milliseconds within) {
  // Indexed by node rank in this attempt; the keys name agent ids (the same, unless elastic).
  std::vector<std::optional<std::string>> got(members_attempt_ == attempt ? members_.size() : 0);
  if (!store_alive_) return got;
  const auto deadline = Clock::now() + within;
  try {
    for (;;) {
      // The texts still due, in one request.
      std::vector<size_t> due;
      std::vector<std::string> keys;
      for (size_t n = 0; n < got.size(); ++n) {
        const int id = members_[n];
        if (id == id_ || got[n] || vanished_.count(id)) continue;
        due.push_back(n);
        keys.push_back(key(attempt, name + "/" + std::to_string(id)));
      }
      if (keys.empty()) return got;
      auto texts = store_->multi_get(keys);
      bool waiting = false;
      for (size_t i = 0; i < due.size(); ++i) {
        got[due[i]] = std::move(texts[i]);
        waiting = waiting || !got[due[i]];
      }
      if (!waiting || Clock::now() >= deadline) return got;
      std::this_thread::sleep_for(milliseconds(50));
    }
  } catch (const Error&) {
    store_alive_ = false;  // what came so far is kept
  }
  return got;
}

}  // namespace distrun::launcher
