// What the static, the elastic and the etcd rendezvous share: one store that every agent
// polls during the run: an authenticated TCPStore hosted by one agent and reached by the
// others, or (etcd) one that no agent hosts. The agents send heartbeats and hold a claim key
// for as long as they live (their connection, or their etcd lease); the host (with etcd:
// every agent) names an agent whose claim is gone (at once) or whose heartbeat stopped (after
// the heartbeat timeout), and the first failure anywhere is written once and read by all. The
// kinds differ only in how they meet (join()) and in the hooks below.
#pragma once
#include <chrono>
#include <memory>
#include <set>

#include "ports.hpp"
#include "rendezvous.hpp"

namespace distrun {
class Store;
class TCPStore;
}  // namespace distrun

namespace distrun::launcher {

class StoreRendezvous : public Rendezvous {
 public:
  ~StoreRendezvous() override;

  std::optional<FailureRecord> watch(int attempt) override { return poll(attempt, true); }
  std::optional<FailureRecord> report_failure(int attempt, const FailureRecord& mine) override;
  std::optional<FailureRecord> finish(int attempt) override;
  std::optional<FailureRecord> first_failure(int attempt) override;
  void acknowledge(int attempt) override;
  void close(const std::optional<FailureRecord>& failure) override;
  void publish(int attempt, const std::string& name, const std::string& text) override;
  std::vector<std::optional<std::string>> gather(int attempt, const std::string& name,
                                                 std::chrono::milliseconds within) override;
  const std::vector<std::string>& node_hosts() const override { return hosts_; }
  const std::vector<int>& node_nproc() const override { return nproc_; }
  const std::string& host() const override { return host_; }

 protected:
  using Clock = std::chrono::steady_clock;
  StoreRendezvous(const JobPlan& plan, const RendezvousOptions& options, SignalWatch& signals);

  // The kind's hooks.
  // A member of `members` (this node included) is lost: whether that ends the job, and the
  // words added to the cause when it does.
  virtual bool loss_is_final(size_t members) const = 0;
  virtual std::string final_loss_note() const { return ""; }
  // The host, at each watch: a node waiting to be let in (a `joining` record), or nullopt.
  virtual std::optional<FailureRecord> newcomer(int /*attempt*/) { return std::nullopt; }
  // The job is over (`text`: "ok" or a final record): says so to nodes still waiting to join.
  virtual void mark_closed(const std::string& /*text*/) {}
  // While waiting for keys: throws what join must throw once the job was closed.
  virtual void check_closed() {}
  // The keys whose write means check_closed() throws.
  virtual std::vector<std::string> closing_keys() const { return {}; }
  // A signal while meeting: this agent leaves; returns whether that ends the job (or throws
  // Interrupted when this node has nothing to end).
  virtual bool leave(int attempt, int sig) = 0;
  // The nodes that must read the failure of `attempt` before the host leaves.
  virtual std::vector<int> readers(int attempt) const = 0;
  // Whether this agent watches the other members (heartbeats, claim keys, newcomers): the
  // host of the store does; with no host, every agent.
  virtual bool watches_members() const { return hosts_store_; }
  // Why a member whose claim key is gone is lost.
  virtual std::string claim_lost_cause() const;
  // A count that moves when a member's claim may have gone: the host's store counts the
  // claims it removed (their connections closed), one number a look however many agents.
  virtual int64_t claims_lost();
  // Every member finished the attempt; called on each agent that does not host the store.
  virtual void all_finished() {}
  // The failure record for the store lost through `e`.
  virtual FailureRecord store_lost(const std::exception& e) const;
  // Where the store is, for messages.
  virtual std::string where() const;
  // Records `mine` as the failure of `attempt` when none is recorded yet; true when it was.
  virtual bool record_first(int attempt, const FailureRecord& mine);

  // Node 0's failure after its own agent did not run for `stalled` (longer than the heartbeat
  // timeout), while `node` (on `host`) gave up on it for `cause`.
  FailureRecord own_stall(std::chrono::milliseconds stalled, int node, const std::string& host,
                          const std::string& cause) const;
  std::string key(int attempt, const std::string& name) const;
  std::string key(const std::string& name) const;
  // Waits for `keys`, seeing signals and failures at once: parked on the listener's
  // connection where this agent has one, else in short slices.
  void wait_keys(int attempt, const std::vector<std::string>& keys, Clock::time_point deadline);
  // wait_keys() on the listener.
  void listen_for(int attempt, const std::vector<std::string>& keys, Clock::time_point deadline);
  // The listener on `attempt`'s failure (keeping the record as settled), from the moment the
  // meeting ends (set_members): an agent held up before it first watches is still told.
  void listen_for_failure(int attempt);
  void check_signal(int attempt, const std::string& during);
  // Connects to the host's store in short tries until `deadline` (a signal ends the wait).
  void connect_to_store(Clock::time_point deadline);
  // The host: waits up to `within` until every node that can read `attempt`'s failure set its
  // key `name`/<id>.
  void wait_for_readers(int attempt, const std::string& name, std::chrono::milliseconds within);
  // The round's members, for heartbeats, finish and acknowledgements.
  void set_members(int attempt, std::vector<int> ids, std::vector<std::string> hosts);
  // The share of node `k` of a plan that gives each node `nproc` workers.
  Assignment share(int attempt, size_t k, const std::vector<int>& nproc, uint16_t port, const std::string& salt);

  JobPlan plan_;
  RendezvousOptions opt_;
  SignalWatch& signals_;
  std::string host_;
  std::unique_ptr<Store> store_;
  TCPStore* tcp_store_ = nullptr;  // store_, where an agent hosts it (static, elastic)
  bool store_alive_ = true;
  bool hosts_store_ = false;  // this agent serves the store (node 0)
  std::string bind_ip_;
  BoundPort workers_socket_;  // held for the whole job: the port stays across restarts
  uint16_t workers_port_ = 0;
  std::vector<std::string> hosts_;  // per member, from the plan
  std::vector<int> nproc_;          // per member, from the plan
  // The current attempt's members: node ranks (static), agent ids (elastic); keys say ids.
  std::vector<int> members_;
  int members_attempt_ = -1;  // the attempt members_ belongs to
  int node_rank_ = 0;         // this node's rank in the current attempt
  int id_ = 0;                // this agent's id: its node rank (static) or ticket (elastic)
  std::set<int> vanished_;

 private:
  // watch(); `admit` false once this node's workers finished (no newcomer is let in then).
  std::optional<FailureRecord> poll(int attempt, bool admit);
  // The host's look at every member: the first one lost, as a failure record.
  std::optional<FailureRecord> check_members(int attempt);
  // Whether a member's claim may be gone since the last look (then each is looked up).
  bool claim_may_be_gone();
  // Not the host: the failure of `attempt` as the listener kept it, for when the store is gone.
  std::optional<FailureRecord> kept_failure(int attempt);
  // How long an agent that does not host the store waits for the host to settle a failure.
  std::chrono::milliseconds settle_wait() const;
  // How often an agent's heartbeat count moves (and the host reads it): an eighth of the
  // heartbeat timeout, so that a silent agent is told from a slow one.
  std::chrono::milliseconds beat_period() const;

  // The host: each member's last heartbeat count and when it last changed.
  std::vector<int64_t> beats_;
  std::vector<Clock::time_point> beat_seen_;
  Clock::time_point beats_read_{};  // when the host last read every member's count
  int64_t claims_lost_seen_ = -1;   // the host's store's count of claims removed, at the last look
  // Not the host: when this agent last beat; the listener for the attempt's failure.
  Clock::time_point last_beat_{};
  // Not the host of a TCPStore: the listener, and the attempt whose failure it waits for.
  class Listener;
  std::unique_ptr<Listener> listener_;
  int listener_attempt_ = -1;
  // The host: when watch() last ran, and for how long this agent itself was not running (a
  // SIGSTOP, a stalled host) when it last came back.
  Clock::time_point last_watch_{};
  bool own_store_late_ = false;  // node 0's last look at its own store timed out (poll())
  std::chrono::milliseconds was_frozen_{0};
  // Not the host: when the store last answered (its silence is a failure only after the
  // heartbeat timeout).
  Clock::time_point last_answer_ = Clock::now();
};

}  // namespace distrun::launcher
