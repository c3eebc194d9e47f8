// How the agents (one distrun per node) agree on each attempt and share one fate. With several
// nodes, node 0 hosts a TCPStore on --master-port (bound to the interface of --master-addr,
// opened only by the job secret) and publishes the plan through it, as torch elastic's static
// rendezvous does. During the run every agent polls it: the other agents send heartbeats,
// node 0 names an agent whose heartbeat stopped, and the first failure anywhere is written
// once and read by all. With one node there is nothing to agree on.
//
// Elastic jobs (--nnodes MIN:MAX, rendezvous_round.cpp) meet in numbered rounds, as torch's
// c10d dynamic rendezvous does: the agent on the host of --master-addr/--rdzv-endpoint hosts
// the store and closes each round (once MIN joined and last_call_timeout passed, or at MAX);
// each round has its own members, plan and failure record, so a node that leaves or arrives
// ends the round and the survivors meet again in the next one.
//
// With --rdzv-backend etcd (rendezvous_etcd.cpp) the same rounds are kept in an etcd cluster
// and no agent hosts anything: the job outlives any one host, node 0's included.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "distrun/core/error.hpp"
#include "job_plan.hpp"
#include "ports.hpp"
#include "rendezvous_messages.hpp"
#include "signal_watch.hpp"

namespace distrun {
class Store;
namespace etcd {
class EtcdStore;
}
}  // namespace distrun

namespace distrun::launcher {

/// The job failed on some node: `record` says where first. Exit 1.
class JobFailed : public Error {
 public:
  explicit JobFailed(FailureRecord record)
      : Error("job failed; first failure: " + record.summary()), record_(std::move(record)) {}
  const FailureRecord& record() const { return record_; }

 private:
  FailureRecord record_;
};

/// An elastic job ended (succeeded, or failed and was closed) before this node was admitted to
/// a round: it ran nothing, and there is nothing left to join.
class JobEndedWithoutUs : public Error {
 public:
  using Error::Error;
};

/// What one attempt gives this node's workers.
struct Assignment {
  int round = 0;          // the attempt (elastic: the round this node was admitted to)
  int node_rank = 0;      // GROUP_RANK (elastic: from the round, by order of first arrival)
  int nnodes = 1;         // GROUP_WORLD_SIZE (elastic: the round's members)
  int restart_count = 0;  // elastic: the job's, from the round's plan (static: the agent counts)
  int world_size = 1;
  int rank_offset = 0;  // global rank of local rank 0
  std::string master_addr;
  uint16_t master_port = 0;
  std::string secret;  // DISTRUN_STORE_SECRET for the workers (fresh per attempt, never sent)
  int listen_fd = -1;  // the bound workers' port for local rank 0, or -1 (borrowed)
};

struct RendezvousOptions {
  std::chrono::milliseconds timeout{300000};  // the nodes wait this long for each other
  std::string secret;                         // the job secret (required with several nodes)
  bool bind_all = false;                      // node 0 listens on 0.0.0.0
  std::optional<uint16_t> workers_port;       // several nodes: fixed workers' port on node 0
  bool hand_socket = false;                   // bind the workers' port here, hand it to rank 0
  bool scenario = false;                      // distrun-worker runs: --results must agree
  bool results_given = false;                 // this node got --results
  // An agent (or node 0's store) silent this long is gone; a closed connection is at once.
  std::chrono::milliseconds heartbeat_timeout{30000};
  std::chrono::milliseconds stop_grace{1000};  // how long stopping workers may take (--stop-grace)
  std::chrono::milliseconds last_call{30000};  // elastic: a round waits this long for more than MIN
  // --rdzv-backend etcd: the cluster's client URLs (HOST:PORT,...); empty: node 0 hosts the store.
  std::string etcd_endpoints;
};

/// Static, not node 0: this node cannot take part (its input was refused before it joined).
/// Records that, as the job's first failure, in node 0's store (trying for a few seconds at
/// most), so that every node ends at once naming it instead of waiting for it; a node 0 that
/// cannot be reached is left to its own rendezvous timeout.
void tell_node0_cannot_join(const JobPlan& plan, RendezvousOptions options, SignalWatch& signals,
                            const std::string& why);

/// The plan of one elastic round, as its host publishes it; parse_round_plan() reads it
/// (MalformedMessage when malformed).
struct RoundPlan {
  uint16_t port = 0;
  std::string salt;  // the workers' secret is derived from it on each node (workers_secret())
  int restart_count = 0;
  std::vector<int> ids;  // the members' agent ids (first-arrival tickets), ascending: node ranks
  std::vector<int> nproc;
  std::vector<std::string> hosts;
  std::string encode() const;
};
RoundPlan parse_round_plan(const std::string& text);

class Rendezvous {
 public:
  /// Multi-node: node 0 binds plan.master_port (StoreError "already in use" when taken),
  /// others connect to it, waiting up to options.timeout. Signals in `signals` interrupt
  /// every wait (Interrupted).
  Rendezvous(const JobPlan& plan, const RendezvousOptions& options, SignalWatch& signals);
  ~Rendezvous();

  /// Meets the other nodes for `attempt` and returns this node's share (elastic: in round
  /// `attempt` or a later one, see Assignment::round). TimeoutError naming
  /// the nodes that never came; JobFailed when a node failed meanwhile; ConfigError when node
  /// 0 refused the job (mismatched options); Interrupted on a signal (the others are told).
  Assignment join(int attempt);
  /// During the run (every few hundred ms): sends this agent's heartbeat and returns the job's
  /// first failure once there is one (another node's, a silent agent's, or the lost store).
  /// Elastic, on the round's host: a node waiting for the next round ends this one (a
  /// `joining` record) unless `admit` is false (this node's workers already finished).
  std::optional<FailureRecord> watch(int attempt, bool admit = true);
  /// Records `mine` as the job's failure unless another came first; returns the first.
  FailureRecord report_failure(int attempt, const FailureRecord& mine);
  /// After local success: waits until every node finished `attempt` (nullopt) or one failed.
  std::optional<FailureRecord> finish(int attempt);
  /// After a failure: others say they have read it (and gathered what they needed); node 0
  /// waits for that, at most the others' stop grace plus 3 s, before leaving, since its exit
  /// takes the store away.
  void acknowledge(int attempt);
  /// Elastic: the job is over (`failure`, or success when nullopt); a node still waiting to
  /// join reads it and ends (JobEndedWithoutUs or JobFailed) instead of waiting for a round.
  void close(const std::optional<FailureRecord>& failure);

  /// Puts this node's `name` text (e.g. its flight report) in the store for `attempt`; a
  /// lost store is not an error here (the failure is already known).
  void publish(int attempt, const std::string& name, const std::string& text);
  /// Every other node's `name` text, waiting at most `within` for those not there yet
  /// (nullopt for a node that sent none in time, that vanished, or when the store is lost).
  /// The element of this node is left empty.
  std::vector<std::optional<std::string>> gather(int attempt, const std::string& name,
                                                 std::chrono::milliseconds within);
  /// Per node, from the plan of the last join: its host and number of workers.
  const std::vector<std::string>& node_hosts() const { return hosts_; }
  const std::vector<int>& node_nproc() const { return nproc_; }

  bool multi_node() const { return store_ != nullptr; }
  bool elastic() const { return plan_.elastic(); }
  /// This node's host name.
  const std::string& host() const { return host_; }

 private:
  std::string key(int attempt, const std::string& name) const;
  std::string key(const std::string& name) const;
  // Waits for `keys` in short slices, so that signals and failures are seen at once.
  void wait_keys(int attempt, const std::vector<std::string>& keys, std::chrono::steady_clock::time_point deadline);
  void check_signal(int attempt, const std::string& during);
  FailureRecord store_lost(const std::exception& e) const;
  Assignment single_node(int attempt);
  // Connects to node 0's store in short tries until `deadline` (a signal ends the wait).
  void connect_to_store(std::chrono::steady_clock::time_point deadline);
  // Static, not node 0: ConfigError (and node 0 told) when node 0 was given another --nnodes.
  void check_same_nnodes(std::chrono::steady_clock::time_point deadline);
  // Elastic (rendezvous_round.cpp): connects to, or hosts, the store; joins rounds from
  // `round` on until one admits this node; the host closes each round and writes its plan.
  void open_elastic_store(const std::string& master_ip, std::chrono::steady_clock::time_point deadline);
  Assignment join_round(int round);
  RoundPlan close_round(int round, std::chrono::steady_clock::time_point deadline);
  // The host of a node waiting in `round` that has not left since (nullopt: none waits).
  std::optional<std::string> waiting_node(int round);
  // The job was closed (a record, or "ok"): throws what join must throw.
  void check_closed();
  bool hosts_store() const { return plan_.elastic() ? elastic_host_ : plan_.node_rank == 0; }
  // The round's members, for heartbeats, finish and acknowledgements.
  void set_members(int attempt, std::vector<int> ids, std::vector<std::string> hosts);

  JobPlan plan_;
  RendezvousOptions opt_;
  SignalWatch& signals_;
  std::string host_;
  std::unique_ptr<Store> store_;  // null on one node
  // --rdzv-backend etcd (rendezvous_etcd.cpp): store_ is this store in etcd, which no agent
  // hosts. Every agent then watches every other, and whoever claims a round first closes it.
  etcd::EtcdStore* etcd_ = nullptr;
  void open_etcd_store();
  // Closes `round` if this agent claims it first; returns once it has a plan or at `deadline`.
  void close_etcd_round(int round, std::chrono::steady_clock::time_point deadline);
  // The address the workers of agent `id` are reached at (its address as etcd sees it).
  std::string etcd_member_address(int id);
  FailureRecord etcd_lost(const std::exception& e) const;
  bool store_alive_ = true;
  std::string bind_ip_;
  /// Binds and holds the workers' port (when the socket is handed to rank 0), or checks that
  /// `requested` is free, or picks a free one: once per job, so restarts keep it.
  void choose_workers_port(std::optional<uint16_t> requested);
  BoundPort workers_socket_;  // held for the whole job: the port stays across restarts
  uint16_t workers_port_ = 0;
  std::vector<std::string> hosts_;  // per member, from the plan
  std::vector<int> nproc_;          // per member, from the plan
  // The current attempt's members: node ranks (static), agent ids (elastic); keys say ids.
  std::vector<int> members_;
  int members_attempt_ = -1;   // the attempt members_ belongs to
  int node_rank_ = 0;          // this node's rank in the current attempt
  int id_ = 0;                 // this agent's id: its node rank (static) or ticket (elastic)
  bool elastic_host_ = false;  // elastic: this agent hosts the store and closes the rounds
  bool first_join_ = true;     // elastic: a newcomer starts from the round being run
  // The round's host: each member's last heartbeat count and when it last changed.
  std::vector<int64_t> beats_;
  std::vector<std::chrono::steady_clock::time_point> beat_seen_;
  std::set<int> vanished_;
  // Node 0: when watch() last ran, and for how long this agent itself was not running (a
  // SIGSTOP, a stalled host) when it last came back.
  std::chrono::steady_clock::time_point last_watch_{};
  // Not node 0: when node 0's store last answered (its silence is a failure only after the
  // heartbeat timeout).
  std::chrono::steady_clock::time_point last_answer_ = std::chrono::steady_clock::now();
  std::chrono::milliseconds was_frozen_{0};
};

}  // namespace distrun::launcher
