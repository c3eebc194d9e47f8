#include "options.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "distrun/core/error.hpp"

namespace distrun::launcher {
namespace {

// torchrun accepts every long option as --a-b and --a_b; CLI11 takes a comma list of names.
std::string both_spellings(const std::string& dashed, const std::string& extra = "") {
  std::string underscored = dashed;
  for (auto& c : underscored)
    if (c == '-') c = '_';
  underscored.replace(0, 2, "--");
  std::string names = dashed;
  if (underscored != dashed) names += "," + underscored;
  if (!extra.empty()) names += "," + extra;
  return names;
}

// torchrun reads every option's default from PET_<DEST> (e.g. PET_NPROC_PER_NODE).
std::string pet(const std::string& dest) {
  std::string name = "PET_";
  for (char c : dest) name += char(std::toupper(static_cast<unsigned char>(c)));
  return name;
}

double positive_seconds(const std::string& key, const std::string& value) {
  char* end = nullptr;
  double v = std::strtod(value.c_str(), &end);
  if (value.empty() || *end != '\0' || !(v > 0) || v > 1e7)
    throw ConfigError("--rdzv-conf " + key + "=" + value + ": expected a positive number of seconds");
  return v;
}

// torch's rendezvous keys and distrun's own; what each does here is in docs/launcher.md.
void apply_rdzv_conf(LaunchOptions& o) {
  if (o.rdzv_conf.empty()) return;
  size_t at = 0;
  while (at <= o.rdzv_conf.size()) {
    size_t comma = o.rdzv_conf.find(',', at);
    std::string item = o.rdzv_conf.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    at = comma == std::string::npos ? o.rdzv_conf.size() + 1 : comma + 1;
    if (item.empty()) continue;
    size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0)
      throw ConfigError("--rdzv-conf " + o.rdzv_conf + ": '" + item + "' is not KEY=VALUE");
    std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "timeout" || key == "join_timeout") {
      double v = positive_seconds(key, value);
      if (!o.rdzv_timeout_given) o.rdzv_timeout = v;
    } else if (key == "last_call_timeout") {
      o.last_call_timeout = positive_seconds(key, value);
    } else if (key == "heartbeat_timeout") {
      o.heartbeat_timeout = positive_seconds(key, value);
    } else if (key == "read_timeout" || key == "close_timeout" || key == "keep_alive_interval") {
      positive_seconds(key, value);  // checked; without effect here (docs/launcher.md says why)
    } else if (key == "keep_alive_max_attempt" || key == "is_host" || key == "use_libuv" || key == "store_type") {
      // accepted for compatibility; distrun's node 0 always hosts the rendezvous
    } else if (key == "stop_grace") {
      o.stop_grace = positive_seconds(key, value);
    } else if (key == "protocol") {
      // torch's etcd backends lower-case it.
      for (auto& c : value) c = char(std::tolower(static_cast<unsigned char>(c)));
      if (value != "http" && value != "https")
        throw ConfigError("--rdzv-conf protocol=" + item.substr(eq + 1) + ": http or https");
      o.etcd_protocol = value;
    } else if (std::string* file = key == "cacert" || key == "ca_cert"     ? &o.etcd_cacert
                                   : key == "cert" || key == "ssl_cert"    ? &o.etcd_cert
                                   : key == "key" || key == "ssl_cert_key" ? &o.etcd_key
                                                                           : nullptr) {
      // The spellings of torch's etcd (cacert, cert, key) and etcd-v2 (ca_cert, ssl_cert,
      // ssl_cert_key) backends; read now, so that a wrong path fails before anything starts.
      if (::access(value.c_str(), R_OK) != 0)
        throw ConfigError("--rdzv-conf " + key + "=" + value + ": cannot read it (" + std::strerror(errno) + ")");
      *file = value;
    } else {
      throw ConfigError("--rdzv-conf: unknown key '" + key +
                        "' (known: timeout, join_timeout, read_timeout, last_call_timeout, close_timeout, "
                        "heartbeat_timeout, keep_alive_interval, keep_alive_max_attempt, is_host, use_libuv, "
                        "store_type, stop_grace; with --rdzv-backend etcd: protocol, cacert, cert, key, ca_cert, "
                        "ssl_cert, ssl_cert_key)");
    }
  }
  const bool etcd_conf =
      !o.etcd_protocol.empty() || !o.etcd_cacert.empty() || !o.etcd_cert.empty() || !o.etcd_key.empty();
  if (etcd_conf && o.rdzv_backend != "etcd" && o.rdzv_backend != "etcd-v2")
    throw ConfigError("--rdzv-conf " + o.rdzv_conf +
                      ": protocol and the certificate files are for --rdzv-backend etcd");
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The full path of `name` as execvp would find it on PATH, or "" when it is not there.
std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t at = 0;
  while (at <= dirs.size()) {
    size_t colon = dirs.find(':', at);
    std::string dir = dirs.substr(at, colon == std::string::npos ? std::string::npos : colon - at);
    if (!dir.empty() && access((dir + "/" + name).c_str(), X_OK) == 0) return dir + "/" + name;
    if (colon == std::string::npos) break;
    at = colon + 1;
  }
  return "";
}

// The interpreter named by a script's "#!" line ("#!/usr/bin/python3.11", or
// "#!/usr/bin/env python3" looked up on PATH), when it is executable; else "".
std::string shebang_interpreter(const std::string& script) {
  std::ifstream in(script);
  std::string line;
  if (!std::getline(in, line) || line.rfind("#!", 0) != 0) return "";
  std::istringstream words(line.substr(2));
  std::string exe, arg;
  words >> exe >> arg;
  if (exe.size() >= 4 && exe.compare(exe.size() - 4, 4, "/env") == 0) exe = arg.empty() ? "" : find_on_path(arg);
  return !exe.empty() && access(exe.c_str(), X_OK) == 0 ? exe : "";
}

// Whether `python` can find the torch package: importlib's find_spec looks without importing
// (tens of milliseconds, where `import torch` takes seconds).
bool finds_torch(const std::string& python) {
  pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    int null = open("/dev/null", O_RDWR);
    dup2(null, STDIN_FILENO);
    dup2(null, STDOUT_FILENO);
    dup2(null, STDERR_FILENO);
    execl(python.c_str(), python.c_str(), "-c",
          "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)", (char*)nullptr);
    _exit(127);
  }
  // find_spec reads a few directories and ends in milliseconds; one that hangs (a stuck
  // network mount) is given up on after 10 s and counts as no torch.
  int status = 0;
  for (int tick = 0; tick < 1000; ++tick) {
    if (waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) && WEXITSTATUS(status) == 0;
    usleep(10000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return false;
}

// torchrun runs every training_script through python. distrun also runs plain programs as
// given, so besides *.py only a file that exec could not start goes through python: a file in
// the current folder named without a '/' and not on PATH (execvp would not look there), or a
// script that is not executable.
bool runs_through_python(const std::string& program) {
  if (ends_with(program, ".py")) return true;
  struct stat st {};
  if (stat(program.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  if (program.find('/') == std::string::npos) return find_on_path(program).empty();
  return access(program.c_str(), X_OK) != 0;
}

// argparse (torchrun's parser) takes any unique prefix of a long option: --nproc_per for
// --nproc_per_node. Rewrites such prefixes in distrun's own part of argv (up to the program)
// to the full name; a prefix of several options is a ConfigError naming them, as argparse's.
std::vector<std::string> expand_abbreviations(const CLI::App& app, int argc, const char* const* argv) {
  std::vector<std::string> args(argv, argv + argc);
  const auto options = app.get_options();
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--" || arg.size() < 2 || arg[0] != '-') break;  // the program begins
    if (arg[1] != '-') {
      // -m, -v, or a short option that takes a value (-r 3, -r3)
      if (arg.size() == 2)
        for (const CLI::Option* opt : options)
          if (opt->check_sname(arg.substr(1)) && opt->get_expected_min() > 0) ++i;
      continue;
    }
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    const CLI::Option* exact = nullptr;
    std::vector<const CLI::Option*> matches;
    std::vector<std::string> spelled;
    for (const CLI::Option* opt : options)
      for (const std::string& long_name : opt->get_lnames()) {
        if (long_name == name) exact = opt;
        if (long_name.rfind(name, 0) == 0 && std::find(matches.begin(), matches.end(), opt) == matches.end()) {
          matches.push_back(opt);
          spelled.push_back("--" + long_name);
        }
      }
    const CLI::Option* opt = exact;
    if (!opt && matches.size() > 1) {
      std::string all;
      for (const auto& s : spelled) all += (all.empty() ? "" : ", ") + s;
      throw ConfigError("ambiguous option: --" + name + " could match " + all + " (see distrun --help)");
    }
    if (!opt && matches.size() == 1) {
      opt = matches.front();
      args[i] = "--" + opt->get_lnames().front() + (eq == std::string::npos ? "" : arg.substr(eq));
    }
    if (opt && opt->get_expected_min() > 0 && eq == std::string::npos) ++i;  // its value follows
  }
  return args;
}

// The usage lines of --help (and so of the man page's synopsis, which help2man makes from them).
class UsageFormatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string) const override {
    return "Usage: distrun [OPTIONS] SCENARIO.yaml\n"
           "  or:  distrun [OPTIONS] [--] PROGRAM [ARGS...]\n"
           "  or:  distrun [OPTIONS] -m MODULE [ARGS...]\n";
  }
};

// --max-restarts and --node-rank: a whole number from 0, said so plainly (CLI11's own range
// check prints its 300-digit upper bound).
const CLI::Validator kCount(
    [](std::string& value) -> std::string {
      char* end = nullptr;
      errno = 0;
      long long v = std::strtoll(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || errno != 0 || v < 0 || v > 1000000)
        return "expected a whole number from 0 to 1000000, got " + value;
      return "";
    },
    "N");

}  // namespace

Interpreter python_interpreter() {
  for (const char* var : {"PYTHON_EXEC", "PYTHON"})
    if (const char* v = std::getenv(var); v && *v) return {v, std::string("$") + var};
  if (const std::string torchrun = find_on_path("torchrun"); !torchrun.empty())
    if (std::string python = shebang_interpreter(torchrun); !python.empty())
      return {python, "the interpreter of " + torchrun};
  const std::string path_python = find_on_path("python3");
  std::vector<std::string> candidates{path_python};
  if (path_python != "/usr/bin/python3") candidates.push_back("/usr/bin/python3");
  for (const std::string& python : candidates)
    if (!python.empty() && access(python.c_str(), X_OK) == 0 && finds_torch(python))
      return {python, "the first python3 that finds torch"};
  if (path_python.empty())
    throw ConfigError("no python3 on PATH to run the program (set PYTHON to an interpreter, or use --no-python)");
  return {path_python, "python3 on PATH (no interpreter with torch found)"};
}

std::vector<std::string> program_argv(const LaunchOptions& o, const Interpreter& python) {
  if (o.program_kind == ProgramKind::as_is) return o.command;
  // torchrun runs `python -u [-m] SCRIPT ARGS...`: unbuffered, so no line is lost on a stop.
  std::vector<std::string> argv{python.path, "-u"};
  if (o.program_kind == ProgramKind::python_module) argv.push_back("-m");
  argv.insert(argv.end(), o.command.begin(), o.command.end());
  return argv;
}

namespace {

// What the options hold before they become LaunchOptions' typed fields.
struct RawOptions {
  std::string numa, stdin_rank = "0", cpu_bind = "auto", event_log_handler = "null";
  std::optional<std::string> logs_specs;
  CLI::Option* rdzv_timeout = nullptr;
};

// Every torchrun option also takes its default from PET_<NAME>.
CLI::Option* env(CLI::Option* opt, const std::string& dest) { return opt->envname(pet(dest)); }

// Nodes, ranks and the rendezvous.
void add_node_options(CLI::App& app, LaunchOptions& o, RawOptions& raw) {
  env(app.add_option(both_spellings("--nproc-per-node", "--nproc"), o.nproc_per_node,
                     "workers per node: N, auto, cpu or gpu (default: the scenario's world_size / nnodes, else 1)"),
      "nproc_per_node");
  env(app.add_option(both_spellings("--nnodes"), o.nnodes,
                     "number of nodes: N, or MIN:MAX for an elastic job (a round starts once MIN nodes joined "
                     "and last_call_timeout passed, or at once with MAX; a node that leaves or arrives restarts the "
                     "others with the new world)"),
      "nnodes");
  env(app.add_option(both_spellings("--node-rank"), o.node_rank,
                     "rank of this node, 0..nnodes-1 (elastic MIN:MAX: ignored, ranks follow arrival)")
          ->check(kCount),
      "node_rank");
  env(app.add_option(both_spellings("--master-addr"), o.master_addr, "address of node 0 (default 127.0.0.1)"),
      "master_addr");
  env(app.add_option(both_spellings("--master-port"), o.master_port, "port of node 0's rendezvous")
          ->check(CLI::Range(1, 65535)),
      "master_port");
  env(app.add_option(both_spellings("--rdzv-backend"), o.rdzv_backend,
                     "static or c10d: distrun's rendezvous (node 0 hosts it); etcd or etcd-v2: kept in the etcd "
                     "cluster at --rdzv-endpoint HOST:PORT[,HOST:PORT...] (elastic --nnodes MIN:MAX), no node special")
          ->check(CLI::IsMember({"static", "c10d", "etcd", "etcd-v2"})),
      "rdzv_backend");
  env(app.add_option(both_spellings("--rdzv-endpoint"), o.rdzv_endpoint,
                     "HOST[:PORT] of node 0, instead of --master-addr/--master-port (port 0: a free one, one node "
                     "only)"),
      "rdzv_endpoint");
  env(app.add_option(both_spellings("--rdzv-conf"), o.rdzv_conf,
                     "KEY=VALUE,...: timeout/join_timeout (seconds the nodes wait for each other), "
                     "last_call_timeout (elastic: seconds a round waits for more nodes once MIN joined, default 30), "
                     "stop_grace, heartbeat_timeout; read_timeout, close_timeout, ... accepted without effect"),
      "rdzv_conf");
  raw.rdzv_timeout = app.add_option(both_spellings("--rdzv-timeout"), o.rdzv_timeout,
                                    "seconds the nodes wait for each other (default 300)")
                         ->check(CLI::PositiveNumber);
  app.add_option(both_spellings("--rdzv-secret-file"), o.rdzv_secret_file,
                 "file (mode 0600) holding the job secret, instead of $DISTRUN_STORE_SECRET");
  app.add_flag(both_spellings("--rdzv-bind-all"), o.rdzv_bind_all,
               "node 0 listens on every interface, not only the one of --master-addr");
  app.add_option(both_spellings("--workers-port"), o.workers_port,
                 "several nodes: the port of the workers' store on node 0 (default: a free one, kept across restarts)")
      ->check(CLI::Range(1, 65535));
}

// The run: restarts, pacing, ids, and how PROGRAM is started.
void add_run_options(CLI::App& app, LaunchOptions& o, RawOptions& raw) {
  env(app.add_flag(both_spellings("--standalone"), o.standalone,
                   "one node, as torchrun's: localhost, a free port, a fresh uuid as the run id"),
      "standalone");
  env(app.add_option(both_spellings("--max-restarts"), o.max_restarts,
                     "restart the whole group up to N times on failure")
          ->check(kCount),
      "max_restarts");
  env(app.add_option(both_spellings("--monitor-interval"), o.monitor_interval,
                     "seconds between checks of the other nodes (workers' ends are seen at once; default 0.1)")
          ->check(CLI::PositiveNumber),
      "monitor_interval");
  env(app.add_option(both_spellings("--start-method"), o.start_method,
                     "spawn, fork or forkserver: accepted; distrun always starts each worker as a fresh process "
                     "(fork+exec)")
          ->check(CLI::IsMember({"spawn", "fork", "forkserver"})),
      "start_method");
  env(app.add_option(both_spellings("--event-log-handler"), raw.event_log_handler,
                     "torchelastic event handler: only 'null' (distrun emits no torchelastic events)")
          ->check(CLI::IsMember({"null"})),
      "event_log_handler");
  app.add_option(both_spellings("--logs-specs"), raw.logs_specs,
                 "torchrun's logs_specs plugin: not supported (exit 2)");
  env(app.add_option(both_spellings("--run-id", "--rdzv-id,--rdzv_id"), o.run_id,
                     "job id (TORCHELASTIC_RUN_ID, log folder)"),
      "rdzv_id");
  env(app.add_option(both_spellings("--role"), o.role, "ROLE_NAME given to the workers (default: default)"), "role");
  env(app.add_flag("-m," + both_spellings("--module"), o.module,
                   "run PROGRAM as a Python module: python -u -m PROGRAM"),
      "module");
  env(app.add_flag(both_spellings("--no-python"), o.no_python, "run PROGRAM itself, never through python"),
      "no_python");
  env(app.add_flag(both_spellings("--run-path"), o.run_path,
                   "run the PROGRAM script with python (torchrun: runpy.run_path); wins over --no-python"),
      "run_path");
}

// The workers: logs, output, CPUs, signals, stdin, stopping.
void add_worker_options(CLI::App& app, LaunchOptions& o, RawOptions& raw) {
  env(app.add_option(both_spellings("--log-dir"), o.log_dir,
                     "write LOG_DIR/RUN_ID_XXXXXXXX/attempt_K/LOCAL_RANK/{stdout,stderr}.log, error.json (a new folder "
                     "per run)"),
      "log_dir");
  env(app.add_option(both_spellings("--redirects", "-r"), o.redirects,
                     "streams sent only to the log files: 0 none, 1 stdout, 2 stderr, 3 both, or 0:1,1:2"),
      "redirects");
  env(app.add_option(both_spellings("--tee", "-t"), o.tee,
                     "streams sent to the log files and the console, same values as --redirects"),
      "tee");
  env(app.add_option(both_spellings("--local-ranks-filter"), o.local_ranks_filter,
                     "only these local ranks' output on the console, e.g. 0,2"),
      "local_ranks_filter");
  env(app.add_option(both_spellings("--local-addr"), o.local_addr,
                     "this node's address: its interface becomes GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME (unless set)"),
      "local_addr");
  app.add_option(both_spellings("--numa-binding"), raw.numa,
                 "bind each worker's CPUs: node, socket or exclusive (needs NUMA information in /sys)")
      ->check(CLI::IsMember({"node", "socket", "exclusive", "core-complex"}));
  app.add_option(both_spellings("--cpu-bind"), raw.cpu_bind,
                 "bind each worker to its own share of the CPUs: core, none, or auto (default: core when "
                 "every worker gets a CPU of its own)")
      ->check(CLI::IsMember({"none", "core", "auto"}));
  env(app.add_option(both_spellings("--signals-to-handle"), o.signals_to_handle,
                     "signals forwarded to the workers before stopping them, with the summary "
                     "(default SIGTERM,SIGINT,SIGHUP,SIGQUIT; add SIGUSR1,SIGUSR2 as SLURM jobs do)"),
      "signals_to_handle");
  app.add_option(both_spellings("--stdin-rank"), raw.stdin_rank,
                 "local rank that reads distrun's standard input (default 0), or none; the others read EOF");
  app.add_option(both_spellings("--launcher"), o.launcher,
                 "where nodes and ranks come from: auto, pytorch, slurm or mpi")
      ->check(CLI::IsMember({"auto", "pytorch", "slurm", "mpi"}));
  app.add_option(both_spellings("--stop-grace"), o.stop_grace,
                 "seconds the workers get between SIGTERM and SIGKILL when the job stops (after a failure, a peer's "
                 "failure or a signal), e.g. to save a checkpoint (default 30, as torchrun)")
      ->check(CLI::Range(0.0, 3600.0));
}

// What a SCENARIO.yaml run takes.
void add_scenario_options(CLI::App& app, LaunchOptions& o) {
  app.add_option(both_spellings("--backend"), o.backend, "scenario backend override: gloo, nccl or auto");
  app.add_option(both_spellings("--device"), o.device, "scenario device override: cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option(both_spellings("--results"), o.results, "scenario results file (JSON Lines)");
  app.add_option(both_spellings("--timeout"), o.timeout, "scenario collective timeout, seconds")
      ->check(CLI::PositiveNumber);
  app.add_option(both_spellings("--log-level"), o.log_level, "worker log level (trace..off)");
  app.add_flag(both_spellings("--check"), o.check_only, "validate the scenario and exit");
  auto* explain =
      app.add_flag(both_spellings("--explain"), o.explain, "draw who sends what to whom in each step, and exit");
  app.add_flag(both_spellings("--values"), o.values, "with --explain: every rank's values before and after each step")
      ->needs(explain);
  app.add_flag("-v," + both_spellings("--verbose"), o.verbose, "say which interpreter and command the workers run");
}

// The raw values as typed fields; ConfigError for what the parser could not refuse itself.
void apply_raw_options(LaunchOptions& o, const RawOptions& raw) {
  o.rdzv_timeout_given = raw.rdzv_timeout->count() > 0;
  apply_rdzv_conf(o);
  if (raw.logs_specs) throw ConfigError("--logs-specs " + *raw.logs_specs + ": distrun has no logs_specs plugins");
  if (raw.numa == "node")
    o.numa_binding = NumaBinding::node;
  else if (raw.numa == "socket")
    o.numa_binding = NumaBinding::socket;
  else if (raw.numa == "exclusive")
    o.numa_binding = NumaBinding::exclusive;
  else if (raw.numa == "core-complex")
    throw ConfigError("--numa-binding core-complex: not yet supported (use node, socket or exclusive)");
  o.cpu_bind = raw.cpu_bind == "none" ? CpuBind::none : raw.cpu_bind == "core" ? CpuBind::core : CpuBind::auto_;
  if (raw.stdin_rank == "none") {
    o.stdin_rank.reset();
  } else {
    if (raw.stdin_rank.empty() || raw.stdin_rank.size() > 6 ||
        raw.stdin_rank.find_first_not_of("0123456789") != std::string::npos)
      throw ConfigError("--stdin-rank " + raw.stdin_rank + ": expected a local rank or none");
    o.stdin_rank = std::stoi(raw.stdin_rank);
  }
  if (o.module && o.no_python && !o.run_path)
    throw ConfigError("--no-python and -m/--module cannot be used together (as torchrun)");
}

// The command after the options: a scenario or a program, and how the program runs.
void read_command(LaunchOptions& o, const CLI::App& app, int argc, const char* const* argv) {
  o.command = app.remaining();
  // With "--" the command is a program, whatever its name; otherwise a lone *.yaml/*.yml
  // names a scenario for distrun-worker.
  bool dashdash = false;
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--") == 0 && argc - i - 1 == int(o.command.size())) dashdash = true;
  if (!o.command.empty() && o.command.front() == "--") {
    o.command.erase(o.command.begin());
    dashdash = true;
  }
  if (o.command.empty()) throw ConfigError("no SCENARIO.yaml or PROGRAM given (see distrun --help)");
  // prefix_command() hands unknown options over as the program; a program named "-x" is
  // still reachable after "--".
  if (!dashdash && o.command.front().size() > 1 && o.command.front()[0] == '-')
    throw ConfigError("unknown option " + o.command.front() + " (see distrun --help)");
  const std::string& first = o.command.front();
  const bool program_flag = o.module || o.run_path || o.no_python;
  o.mode = (!dashdash && !program_flag && (ends_with(first, ".yaml") || ends_with(first, ".yml"))) ? RunMode::scenario
                                                                                                   : RunMode::program;
  if (o.mode == RunMode::scenario && o.command.size() > 1)
    throw ConfigError("unexpected argument '" + o.command[1] + "' after the scenario " + first +
                      " (use -- PROGRAM ARGS... to run a program)");
  if (o.check_only && o.mode != RunMode::scenario) throw ConfigError("--check needs a SCENARIO.yaml");
  if (o.explain && o.mode != RunMode::scenario) throw ConfigError("--explain needs a SCENARIO.yaml");
  if (o.mode == RunMode::program) {
    if (o.run_path)
      o.program_kind = ProgramKind::python_script;
    else if (o.no_python)
      o.program_kind = ProgramKind::as_is;
    else if (o.module)
      o.program_kind = ProgramKind::python_module;
    else if (runs_through_python(first))
      o.program_kind = ProgramKind::python_script;
  }
}

}  // namespace

ParseResult parse_launch_options(int argc, const char* const* argv) {
  ParseResult result;
  LaunchOptions& o = result.options;
  CLI::App app{"distrun: run a scenario (or any program) on every rank, torchrun-style", "distrun"};
  app.formatter(std::make_shared<UsageFormatter>());
  app.set_version_flag("--version", "distrun 0.1.0");
  // Everything from the first positional on belongs to the program (as torchrun's
  // training_script and its args); "--" ends the options explicitly.
  app.prefix_command();

  app.footer(
      "A PROGRAM ending in .py runs as `python -u PROGRAM ARGS...`, as torchrun runs it, with $PYTHON_EXEC or "
      "$PYTHON, else the interpreter of a torchrun on PATH, else a python3 that finds torch, else python3 (-v says "
      "which); so does a PROGRAM exec could not start (a file of the current folder, not on PATH). -m runs "
      "`python -u -m MODULE`; --no-python runs PROGRAM itself. Any other PROGRAM runs as given. A lone "
      "SCENARIO.yaml runs distrun-worker. Every torchrun option also takes its default from PET_<NAME> (e.g. "
      "PET_NPROC_PER_NODE), and any unique prefix of a long option is taken (--nproc_per), as torchrun's.");
  RawOptions raw;
  add_node_options(app, o, raw);
  add_run_options(app, o, raw);
  add_worker_options(app, o, raw);
  add_scenario_options(app, o);

  try {
    const std::vector<std::string> expanded = expand_abbreviations(app, argc, argv);
    std::vector<const char*> args;
    for (const auto& a : expanded) args.push_back(a.c_str());
    app.parse(int(args.size()), args.data());
  } catch (const CLI::CallForHelp& e) {
    result.exit_now = app.exit(e);
    return result;
  } catch (const CLI::CallForVersion& e) {
    result.exit_now = app.exit(e);
    return result;
  } catch (const CLI::ParseError& e) {
    throw ConfigError(std::string(e.what()) + " (see distrun --help)");
  }

  apply_raw_options(o, raw);
  read_command(o, app, argc, argv);
  return result;
}

}  // namespace distrun::launcher
