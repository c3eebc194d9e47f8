// How the agents (one distrun per node) agree on each attempt and share one fate, behind one
// interface with an implementation per kind of job, chosen once by make_rendezvous():
//   one node (one_node.*)          nothing to agree on: a port and a workers' secret
//   static nodes (static_nodes.*)  --nnodes N: node 0 hosts an authenticated TCPStore on
//                                  --master-port and publishes each attempt's plan through it,
//                                  as torch elastic's static rendezvous does
//   elastic (elastic.*)            --nnodes MIN:MAX: numbered rounds on the same kind of store,
//                                  as torch's c10d dynamic rendezvous forms them
//   etcd (etcd.*)                  --rdzv-backend etcd|etcd-v2: the elastic rounds kept in an
//                                  etcd cluster, which no agent hosts
// The kinds over a store share store_rendezvous.*: heartbeats, the first failure written
// once and read by all, the end of an attempt. Another backend (another kind of store, say)
// is one more implementation of Rendezvous and one more line in make_rendezvous().
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distrun/core/error.hpp"
#include "job_plan.hpp"
#include "rendezvous_messages.hpp"
#include "signal_watch.hpp"

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
  int restart_count = 0;  // TORCHELASTIC_RESTART_COUNT: the job's restarts so far
  int log_attempt = 0;    // the logs' attempt_K folder (see join())
  int world_size = 1;
  int rank_offset = 0;  // global rank of local rank 0
  std::string master_addr;
  uint16_t master_port = 0;
  std::string secret;  // DISTRUN_STORE_SECRET for the workers (fresh per attempt, never sent)
  int listen_fd = -1;  // the bound workers' port for local rank 0, or -1 (borrowed)
};

struct RendezvousOptions {
  std::string backend = "static";             // --rdzv-backend
  std::string endpoint;                       // --rdzv-endpoint as given (etcd: HOST:PORT,... of the cluster)
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
  // etcd: --rdzv-conf protocol (endpoints without a scheme get it) and TLS files, each in
  // place of its ETCDCTL_ variable when given.
  std::string etcd_protocol, etcd_cacert, etcd_cert, etcd_key;
};

/// One agent's part in the job's agreement. Every wait is bounded (options.timeout, or the
/// heartbeat timeout during a run) and ends early on a signal of the SignalWatch given at
/// construction (Interrupted; the other nodes are told).
class Rendezvous {
 public:
  virtual ~Rendezvous() = default;

  /// Meets the other nodes for `attempt`, the agent's `restarts` so far, and returns this
  /// node's share; an implementation that counts the job's restarts itself (elastic: the
  /// round's plan) returns a later round and its own count. log_attempt is the restart count,
  /// as torchrun's, or a number that a restart for a joining node does not reuse.
  /// TimeoutError naming the nodes that never came; JobFailed when a node failed meanwhile;
  /// ConfigError when the job was refused (mismatched options); JobEndedWithoutUs.
  virtual Assignment join(int attempt, int restarts) = 0;
  /// During the run (every few hundred ms): sends this agent's heartbeat and returns the job's
  /// first failure once there is one (another node's, a silent agent's, or the lost store).
  virtual std::optional<FailureRecord> watch(int attempt) = 0;
  /// Records `mine` as the job's failure unless another came first, and returns the first;
  /// nullopt when there is no other node to tell (the failure is this node's alone). A frozen
  /// worker's record (mine.frozen) takes the place of a failed worker's that came first.
  virtual std::optional<FailureRecord> report_failure(int attempt, const FailureRecord& mine) = 0;
  /// After acknowledge(): the job's first failure of `attempt`, the same on every node. It may
  /// have changed since report_failure() or watch() read it, when a node found a frozen worker
  /// that the failed ones had waited for. nullopt when none is recorded or none can be read
  /// (alone, or lost).
  virtual std::optional<FailureRecord> first_failure(int attempt) = 0;
  /// Whether this node leaving `attempt` (a signal) ends the job rather than the round.
  virtual bool leaving_is_final(int attempt) const = 0;
  /// After local success: waits until every node finished `attempt` (nullopt) or one failed.
  virtual std::optional<FailureRecord> finish(int attempt) = 0;
  /// After a failure: this node has read it (and gathered what it needed); the node holding
  /// the shared state waits for the others, bounded, before leaving.
  virtual void acknowledge(int attempt) = 0;
  /// The job is over (`failure`, or success when nullopt): a node still waiting to be
  /// admitted reads it and ends instead of waiting.
  virtual void close(const std::optional<FailureRecord>& failure) = 0;
  /// The words for a restart after `first`, another node's failure.
  virtual std::string restart_reason(const FailureRecord& first) const = 0;

  /// Puts this node's `name` text (e.g. its flight report) in the shared state for `attempt`;
  /// a lost store is not an error here (the failure is already known).
  virtual void publish(int attempt, const std::string& name, const std::string& text) = 0;
  /// Every other node's `name` text, waiting at most `within` for those not there yet
  /// (nullopt for a node that sent none in time, that vanished, or when the store is lost).
  /// Indexed by node rank; the element of this node is left empty.
  virtual std::vector<std::optional<std::string>> gather(int attempt, const std::string& name,
                                                         std::chrono::milliseconds within) = 0;
  /// Per node, from the plan of the last join: its host and number of workers.
  virtual const std::vector<std::string>& node_hosts() const = 0;
  virtual const std::vector<int>& node_nproc() const = 0;
  /// This node's host name.
  virtual const std::string& host() const = 0;
};

/// The rendezvous of `plan`'s kind of job. Several nodes: node 0 binds plan.master_port
/// (PortInUse, a ConfigError, when taken), others connect to it, waiting up to
/// options.timeout. ConfigError for an unknown options.backend.
std::unique_ptr<Rendezvous> make_rendezvous(const JobPlan& plan, const RendezvousOptions& options,
                                            SignalWatch& signals);

/// What the kind of job that `plan`'s --nnodes names allows and fixes, before the rest of the
/// plan is read (plan_job()): an elastic range takes its node rank from the rounds (arrival
/// order, as torchrun's c10d rendezvous: 0 until then), runs programs only, and only under
/// --launcher pytorch. ConfigError otherwise.
void fit_plan_to_kind(JobPlan& plan, const LaunchOptions& options);

/// The job secret for `plan`'s rendezvous (load_job_secret()): required with several nodes
/// (ConfigError, unless only checking) and checked strong.
std::optional<std::string> rendezvous_secret(const LaunchOptions& options, const JobPlan& plan, const EnvLookup& env);

/// This node cannot take part (its input was refused before it joined): where another node
/// waits for it, records that as the job's first failure (trying for a few seconds at most),
/// so that every node ends at once naming it; a node 0 that cannot be reached is left to its
/// own rendezvous timeout.
void tell_cannot_join(const JobPlan& plan, const RendezvousOptions& options, SignalWatch& signals,
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

}  // namespace distrun::launcher
