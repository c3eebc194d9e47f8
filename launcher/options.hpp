// The launcher's command line: torchrun's options (dash and underscore spellings) plus
// distrun's own. Parsing only; resolving nodes, ranks and ports happens in job_plan.hpp.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace distrun::launcher {

/// What to run on every rank.
enum class RunMode { scenario, program };

struct LaunchOptions {
  std::string nproc_per_node;        // N, auto, cpu or gpu; empty: not given
  std::string nnodes = "1";          // N or MIN:MAX with MIN == MAX (static)
  int node_rank = 0;
  std::string master_addr;           // empty: not given (127.0.0.1 on one node)
  std::optional<int> master_port;    // not given: a free port on one node, 29500 across nodes
  std::string rdzv_endpoint;         // HOST[:PORT], overrides master_addr/port
  bool standalone = false;
  int max_restarts = 0;
  std::string run_id = "none";       // torchrun's default
  std::string role = "default";
  std::string log_dir;
  std::string redirects = "0";
  std::string tee = "0";
  std::string local_ranks_filter;    // "0,2": only these local ranks' output on the console
  std::string launcher = "auto";     // auto | pytorch | slurm | mpi
  double rdzv_timeout = 300;         // seconds the agents wait for each other
  std::string rdzv_secret_file;      // job secret (else $DISTRUN_STORE_SECRET); mode 0600 checked
  bool rdzv_bind_all = false;        // node 0's rendezvous on 0.0.0.0, not the master's interface
  std::optional<int> workers_port;   // several nodes: the workers' store port on node 0 (else free)
  double stop_grace = 1.0;           // seconds between SIGTERM and SIGKILL when stopping workers
  // Scenario options, passed on to distrun-worker.
  std::optional<std::string> backend;
  std::optional<std::string> results;
  std::optional<double> timeout;
  std::optional<std::string> log_level;
  bool check_only = false;

  RunMode mode = RunMode::program;
  std::vector<std::string> command;  // scenario mode: {SCENARIO}; program mode: {PROGRAM, ARGS...}
};

/// Outcome of parsing: either options to run, or an exit status to return right away
/// (after --help or --version printed their text).
struct ParseResult {
  LaunchOptions options;
  std::optional<int> exit_now;
};

/// Parses argv. ConfigError (exit 2) for a bad command line; the message names the option.
ParseResult parse_launch_options(int argc, const char* const* argv);

}  // namespace distrun::launcher
