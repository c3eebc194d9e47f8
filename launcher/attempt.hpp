// One attempt of the job on this node: spawn the workers for an assignment, watch them and the
// other nodes, and report the first failure (console, other nodes, flight records). The agent's
// restart loop (agent.cpp) decides what follows.
#pragma once
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "job_plan.hpp"
#include "log_dir.hpp"
#include "options.hpp"
#include "output_router.hpp"
#include "rendezvous/rendezvous.hpp"
#include "signal_watch.hpp"
#include "worker_env.hpp"
#include "worker_group.hpp"

namespace distrun::launcher {

/// What every attempt of this agent shares, settled before the first.
struct AgentJob {
  AgentJob(const LaunchOptions& o, JobPlan p, SignalWatch& s, RunLogDir& l, OutputConfig out)
      : options(o), plan(std::move(p)), signals(s), logs(l), output(std::move(out)) {}

  const LaunchOptions& options;
  JobPlan plan;
  SignalWatch& signals;
  RunLogDir& logs;
  OutputConfig output;
  bool redirected = false;  // a stream goes to the log files
  std::optional<Interpreter> python;
  std::vector<std::string> command;    // what each worker runs
  std::string what;                    // the program or scenario, as a user names it
  std::vector<std::vector<int>> cpus;  // per local rank; empty: not bound
  // --cpu-bind auto: cpus apply only where this node's agent is alone on its host (see
  // run_attempt()).
  bool cpus_if_alone = false;
  EnvMap base_env;
  std::chrono::milliseconds watch_interval{750};  // how often the other nodes are watched
};

struct AttemptOutcome {
  GroupResult result;
  std::optional<FailureRecord> first;  // the job's first failure, when other nodes share it
  std::string summary;                 // this node's own failure, for TORCHELASTIC_ERROR_FILE
  std::string log_error;               // a log that could not be written
};

/// Runs `attempt` of the job with `a`, the agent's `restart` so far, to its end on this node.
AttemptOutcome run_attempt(const AgentJob& job, Rendezvous& rendezvous, const Assignment& a, int attempt, int restart);

/// The same line on every node: where the job failed first.
void print_job_failure(const FailureRecord& first);

}  // namespace distrun::launcher
