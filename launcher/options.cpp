#include "options.hpp"

#include <CLI/CLI.hpp>
#include <cstring>
#include <iostream>

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

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

ParseResult parse_launch_options(int argc, const char* const* argv) {
  ParseResult result;
  LaunchOptions& o = result.options;
  CLI::App app{"distrun: run a scenario (or any program) on every rank, torchrun-style", "distrun"};
  app.set_version_flag("--version", "distrun 0.1.0");
  // Everything from the first positional on belongs to the program (as torchrun's
  // training_script and its args); "--" ends the options explicitly.
  app.prefix_command();

  app.add_option(both_spellings("--nproc-per-node", "--nproc"), o.nproc_per_node,
                 "workers per node: N, auto, cpu or gpu (default: the scenario's world_size / nnodes, else 1)");
  app.add_option(both_spellings("--nnodes"), o.nnodes, "number of nodes: N (or N:N)");
  app.add_option(both_spellings("--node-rank"), o.node_rank, "rank of this node, 0..nnodes-1")->check(CLI::NonNegativeNumber);
  app.add_option(both_spellings("--master-addr"), o.master_addr, "address of node 0 (default 127.0.0.1)");
  app.add_option(both_spellings("--master-port"), o.master_port, "port of node 0's rendezvous")->check(CLI::Range(1, 65535));
  app.add_option(both_spellings("--rdzv-endpoint"), o.rdzv_endpoint, "HOST[:PORT] of node 0, instead of --master-addr/--master-port");
  app.add_option(both_spellings("--rdzv-timeout"), o.rdzv_timeout, "seconds the nodes wait for each other (default 300)")->check(CLI::PositiveNumber);
  app.add_option(both_spellings("--rdzv-secret-file"), o.rdzv_secret_file,
                 "file (mode 0600) holding the job secret, instead of $DISTRUN_STORE_SECRET");
  app.add_flag(both_spellings("--rdzv-bind-all"), o.rdzv_bind_all,
               "node 0 listens on every interface, not only the one of --master-addr");
  app.add_option(both_spellings("--workers-port"), o.workers_port,
                 "several nodes: the port of the workers' store on node 0 (default: a free one, kept across restarts)")
      ->check(CLI::Range(1, 65535));
  app.add_flag(both_spellings("--standalone"), o.standalone, "one node; pick a free port");
  app.add_option(both_spellings("--max-restarts"), o.max_restarts, "restart the whole group up to N times on failure")->check(CLI::NonNegativeNumber);
  app.add_option(both_spellings("--run-id", "--rdzv-id,--rdzv_id"), o.run_id, "job id (TORCHELASTIC_RUN_ID, log folder)");
  app.add_option(both_spellings("--role"), o.role, "ROLE_NAME given to the workers (default: default)");
  app.add_option(both_spellings("--log-dir"), o.log_dir, "write LOG_DIR/RUN_ID/attempt_K/LOCAL_RANK/{stdout,stderr}.log");
  app.add_option(both_spellings("--redirects", "-r"), o.redirects, "streams sent only to the log files: 0 none, 1 stdout, 2 stderr, 3 both, or 0:1,1:2");
  app.add_option(both_spellings("--tee", "-t"), o.tee, "streams sent to the log files and the console, same values as --redirects");
  app.add_option(both_spellings("--local-ranks-filter"), o.local_ranks_filter, "only these local ranks' output on the console, e.g. 0,2");
  app.add_option(both_spellings("--launcher"), o.launcher, "where nodes and ranks come from: auto, pytorch, slurm or mpi")
      ->check(CLI::IsMember({"auto", "pytorch", "slurm", "mpi"}));
  app.add_option(both_spellings("--stop-grace"), o.stop_grace, "seconds from SIGTERM to SIGKILL when stopping workers (default 1)")->check(CLI::NonNegativeNumber);
  app.add_option(both_spellings("--backend"), o.backend, "scenario backend override: gloo, nccl or auto");
  app.add_option(both_spellings("--results"), o.results, "scenario results file (JSON Lines)");
  app.add_option(both_spellings("--timeout"), o.timeout, "scenario collective timeout, seconds")->check(CLI::PositiveNumber);
  app.add_option(both_spellings("--log-level"), o.log_level, "worker log level (trace..off)");
  app.add_flag(both_spellings("--check"), o.check_only, "validate the scenario and exit");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    result.exit_now = app.exit(e);
    return result;
  } catch (const CLI::CallForVersion& e) {
    result.exit_now = app.exit(e);
    return result;
  } catch (const CLI::ParseError& e) {
    throw ConfigError(std::string(e.what()) + " (see distrun --help)");
  }

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
  o.mode = (!dashdash && (ends_with(first, ".yaml") || ends_with(first, ".yml"))) ? RunMode::scenario : RunMode::program;
  if (o.mode == RunMode::scenario && o.command.size() > 1)
    throw ConfigError("unexpected argument '" + o.command[1] + "' after the scenario " + first +
                      " (use -- PROGRAM ARGS... to run a program)");
  if (o.check_only && o.mode != RunMode::scenario) throw ConfigError("--check needs a SCENARIO.yaml");
  return result;
}

}  // namespace distrun::launcher
