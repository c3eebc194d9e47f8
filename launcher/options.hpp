// The launcher's command line: torchrun's options (dash and underscore spellings) plus
// distrun's own. Parsing only; resolving nodes, ranks and ports happens in job_plan.hpp.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "cpu_bind.hpp"

namespace distrun::launcher {

/// What to run on every rank.
enum class RunMode { scenario, program };

/// How a program is started, as torchrun decides it: `python -u SCRIPT`, `python -u -m MODULE`,
/// or the command itself (--no-python, or a program that is not a *.py file).
enum class ProgramKind { python_script, python_module, as_is };

/// --numa-binding (torchrun 2.x's affinity modes).
enum class NumaBinding { none, node, socket, exclusive, core_complex };

struct LaunchOptions {
  std::string nproc_per_node;  // N, auto, cpu or gpu; empty: not given
  std::string nnodes = "1";    // N (static) or MIN:MAX (elastic when MIN < MAX)
  int node_rank = 0;
  std::string master_addr;         // empty: not given (127.0.0.1 on one node)
  std::optional<int> master_port;  // not given: a free port on one node, 29500 across nodes
  std::string rdzv_endpoint;       // HOST[:PORT], overrides master_addr/port
  bool standalone = false;
  int max_restarts = 0;
  std::string run_id = "none";  // torchrun's default
  std::string role = "default";
  std::string log_dir;
  std::string redirects = "0";
  std::string tee = "0";
  std::string local_ranks_filter;   // "0,2": only these local ranks' output on the console
  std::string launcher = "auto";    // auto | pytorch | slurm | mpi
  double rdzv_timeout = 300;        // seconds the agents wait for each other
  double last_call_timeout = 30;    // elastic: seconds a round stays open once MIN nodes joined
  double heartbeat_timeout = 30;    // several nodes: seconds of silence before an agent is gone
  std::string rdzv_secret_file;     // job secret (else $DISTRUN_STORE_SECRET); mode 0600 checked
  bool rdzv_bind_all = false;       // node 0's rendezvous on 0.0.0.0, not the master's interface
  std::optional<int> workers_port;  // several nodes: the workers' store port on node 0 (else free)
  double stop_grace = 30.0;         // seconds between SIGTERM and SIGKILL when stopping workers (torchrun's 30)
  // Scenario options, passed on to distrun-worker.
  std::optional<std::string> backend;
  std::optional<std::string> device;  // scenario device override: cpu or cuda
  std::optional<std::string> results;
  std::optional<double> timeout;
  std::optional<std::string> log_level;
  bool check_only = false;
  bool explain = false;  // draw who sends what to whom per step, and exit
  bool values = false;   // with explain: every rank's values before and after each step
  bool verbose = false;  // -v: say which interpreter and command the workers run
  // torchrun 2.x options (see docs/launcher.md for what each does here).
  std::string rdzv_backend = "static";  // static | c10d: distrun's rendezvous; etcd | etcd-v2: etcd's
  std::string rdzv_conf;                // key=value,...; parsed into rdzv_timeout/stop_grace
  bool rdzv_timeout_given = false;      // --rdzv-timeout wins over --rdzv-conf timeouts
  // etcd over TLS, in torchrun's --rdzv-conf keys: protocol (http|https) and the PEM files.
  std::string etcd_protocol, etcd_cacert, etcd_cert, etcd_key;
  double monitor_interval = 0.1;       // seconds between polls of the other nodes
  std::string start_method = "spawn";  // accepted; distrun always fork+execs a fresh process
  std::string local_addr;              // picks the interface for GLOO/NCCL_SOCKET_IFNAME
  std::string signals_to_handle = "SIGTERM,SIGINT,SIGHUP,SIGQUIT";
  NumaBinding numa_binding = NumaBinding::none;
  CpuBind cpu_bind = CpuBind::auto_;  // --cpu-bind, when no --numa-binding is given
  bool module = false;                // -m: run the program as `python -u -m MODULE`
  bool no_python = false;             // run the program itself, never through python
  bool run_path = false;              // python -u SCRIPT (torchrun: runpy.run_path); beats --no-python
  std::optional<int> stdin_rank = 0;  // local rank that reads distrun's stdin; nullopt: none
  ProgramKind program_kind = ProgramKind::as_is;

  RunMode mode = RunMode::program;
  std::vector<std::string> command;  // scenario mode: {SCENARIO}; program mode: {PROGRAM, ARGS...}
};

/// Outcome of parsing: either options to run, or an exit status to return right away
/// (after --help or --version printed their text).
struct ParseResult {
  LaunchOptions options;
  std::optional<int> exit_now;
};

/// The Python interpreter for *.py programs and -m, and why it was chosen (for -v and the
/// failure summary).
struct Interpreter {
  std::string path;
  std::string reason;
};

/// $PYTHON_EXEC (torchrun's variable), else $PYTHON, else the interpreter a torchrun on PATH
/// runs under (its #! line), else the first of PATH's python3 and /usr/bin/python3 that can find
/// torch (asked with importlib.util.find_spec, which does not import it), else PATH's python3.
/// ConfigError when there is none at all.
Interpreter python_interpreter();

/// The argv a worker runs for program mode: {python, -u, [-m], PROGRAM, ARGS...} or the command.
std::vector<std::string> program_argv(const LaunchOptions& options, const Interpreter& python);

/// Parses argv. ConfigError (exit 2) for a bad command line; the message names the option.
ParseResult parse_launch_options(int argc, const char* const* argv);

}  // namespace distrun::launcher
