// The texts agents exchange through the rendezvous store: what each node declares when it
// joins, the plan node 0 publishes, and the job's first failure. They come from other agents
// that proved the job secret, yet a malformed one (a different version, a bug, a corrupted
// store) must be a MalformedMessage (a StoreError), never a crash or a wrong plan: each has one encoder and one
// strict decoder here, without sockets, so that the fuzzer (fuzz: rendezvous) can drive them.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "distrun/core/error.hpp"

namespace distrun::launcher {

/// A text from another agent that is not what this version writes (exit 1, like any
/// StoreError, but never taken for a lost store).
class MalformedMessage : public StoreError {
 public:
  using StoreError::StoreError;
};

/// The job's first failure, as every node prints it.
struct FailureRecord {
  bool final = false;  // ends the job even with restarts left (an agent is gone or was stopped)
  std::string host;
  int node_rank = 0;  // -1: a node that has no rank yet (elastic: one asking to join)
  int rank = -1;      // global rank of the failed worker; -1 when the agent itself failed
  std::string cause;
  // Elastic: a node asks to join the running round; everyone restarts with it, and (as with
  // torchrun) that restart is not counted against --max-restarts.
  bool joining = false;
  // The worker `rank` was found stopped (SIGSTOP, frozen): the ranks that failed waiting for
  // it are not the cause, so this record supersedes theirs.
  bool frozen = false;

  /// "host H, node rank K, rank R: CAUSE" (rank omitted for an agent, node rank for a node
  /// that has none yet).
  std::string summary() const;
  /// Four lines, then the cause (which may hold newlines). A line break in the host, which
  /// would shift the fields, is sent as a space.
  std::string encode() const;
  /// MalformedMessage when `text` is not an encoded record.
  static FailureRecord decode(const std::string& text);
};

/// What one node declares when it joins an attempt.
struct NodeEntry {
  int nproc = 1;
  bool results_given = false;
  std::string host;  // no whitespace (a host name)

  std::string encode() const;
  /// MalformedMessage when malformed.
  static NodeEntry decode(const std::string& text);
};

/// The multi-node plan node 0 publishes: the workers' port, the salt each node derives the
/// workers' secret with (workers_secret(), never the secret itself), and every node's share,
/// or why node 0 refused the job.
struct PlanText {
  bool refused = false;
  std::string message;  // why node 0 refused the job
  uint16_t port = 0;
  std::string salt;                // fresh per attempt, public
  std::vector<int> nproc;          // per node
  std::vector<std::string> hosts;  // per node

  std::string encode() const;
};
/// MalformedMessage when malformed, or when it does not hold exactly `nnodes` nodes.
PlanText parse_plan(const std::string& text, int nnodes);

/// Largest number of nodes a plan may name, and of ranks in all.
inline constexpr int kMaxPlanNodes = 1 << 16;
inline constexpr int64_t kMaxWorld = 1 << 30;

}  // namespace distrun::launcher
