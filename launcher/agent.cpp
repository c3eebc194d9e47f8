#include "agent.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "distrun/core/error.hpp"
#include "distrun/nccl/device_choice.hpp"
#include "distrun/scenario/load/loader.hpp"
#include "distrun/scenario/run/api.hpp"
#include "attempt.hpp"
#include "cpu_bind.hpp"
#include "failure_report.hpp"
#include "job_secret.hpp"
#include "numa_binding.hpp"
#include "signal_names.hpp"
#include "subreaper.hpp"

namespace distrun::launcher {
namespace {

// $TMPDIR (else /tmp) as the real folder it names: a TMPDIR that is a symlink (to a scratch
// disk, say) is the user's own setting, unlike a symlinked --log-dir, which RunLogDir refuses.
std::string temporary_folder() {
  const char* tmp = std::getenv("TMPDIR");
  const std::string named = tmp && *tmp ? tmp : "/tmp";
  std::error_code ec;
  const std::filesystem::path real = std::filesystem::canonical(named, ec);
  return ec ? named : real.string();
}

// distrun-worker lives next to distrun (build/bin, or the install's bin).
std::string worker_path() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw Error("cannot read /proc/self/exe to find distrun-worker");
  std::string self(buf, size_t(n));
  std::string path = self.substr(0, self.rfind('/') + 1) + "distrun-worker";
  if (access(path.c_str(), X_OK) != 0) throw Error("distrun-worker not found next to distrun: " + path);
  return path;
}

std::vector<std::string> worker_command(const LaunchOptions& o, const std::optional<Interpreter>& python) {
  if (o.mode == RunMode::program) return program_argv(o, python.value_or(Interpreter{}));
  std::vector<std::string> argv{worker_path(), o.command.front()};
  if (o.results) argv.insert(argv.end(), {"--results", *o.results});
  if (o.backend) argv.insert(argv.end(), {"--backend", *o.backend});
  if (o.device) argv.insert(argv.end(), {"--device", *o.device});
  if (o.timeout) argv.insert(argv.end(), {"--timeout", std::to_string(*o.timeout)});
  if (o.log_level) argv.insert(argv.end(), {"--log-level", *o.log_level});
  return argv;
}

void note(const std::string& text) { std::cerr << "distrun: " << text << std::endl; }

std::chrono::milliseconds seconds(double s) { return std::chrono::milliseconds(int64_t(s * 1000)); }

RendezvousOptions rendezvous_options(const LaunchOptions& o, const std::optional<std::string>& secret) {
  RendezvousOptions ro;
  ro.backend = o.rdzv_backend;
  ro.endpoint = o.rdzv_endpoint;
  ro.timeout = seconds(o.rdzv_timeout);
  ro.secret = secret.value_or("");
  ro.bind_all = o.rdzv_bind_all;
  if (o.workers_port) ro.workers_port = uint16_t(*o.workers_port);
  // distrun-worker takes the bound socket; any other program binds MASTER_PORT itself.
  ro.hand_socket = o.mode == RunMode::scenario;
  ro.scenario = o.mode == RunMode::scenario;
  ro.results_given = o.results.has_value();
  ro.last_call = seconds(o.last_call_timeout);
  ro.stop_grace = seconds(o.stop_grace);
  ro.heartbeat_timeout = seconds(o.heartbeat_timeout);
  ro.etcd_protocol = o.etcd_protocol;
  ro.etcd_cacert = o.etcd_cacert;
  ro.etcd_cert = o.etcd_cert;
  ro.etcd_key = o.etcd_key;
  return ro;
}

// Checks the scenario against the job's world before anything starts; for --check and
// --explain, also the whole run (their exit status). A node whose scenario is refused tells
// the nodes waiting for it.
std::optional<int> check_scenario_first(const LaunchOptions& o, const scenario::Scenario& sc, const JobPlan& plan,
                                        const RendezvousOptions& ro) {
  const int world = plan.nproc_per_node * plan.nnodes;  // static rendezvous: equal nodes assumed here
  try {
    check_scenario(sc, world, plan.nproc_per_node, scenario_backend(sc, o.backend, o.device));
    if (o.results) check_results_path(*o.results, sc);
  } catch (const ConfigError& e) {
    if (!o.check_only && !o.explain) {
      // Signals are watched only while the others are told (at most 5 s), not while checking.
      SignalWatch telling(parse_signal_list(o.signals_to_handle));
      tell_cannot_join(plan, ro, telling, e.what());
    }
    throw;
  }
  if (o.explain) {
    explain_scenario(sc, world, std::cout, ::isatty(STDOUT_FILENO) && !std::getenv("NO_COLOR"), o.values);
    return 0;
  }
  if (o.check_only) {
    std::cout << o.command.front() << ": ok (world_size " << world << ")" << std::endl;
    return 0;
  }
  return std::nullopt;
}

OutputConfig output_config(const LaunchOptions& o) {
  OutputConfig output;
  output.redirects = StdSpec::parse(o.redirects, "--redirects");
  output.tee = StdSpec::parse(o.tee, "--tee");
  output.console_ranks = parse_local_ranks_filter(o.local_ranks_filter);
  return output;
}

// Everything an attempt needs that does not change between attempts.
AgentJob agent_job(const LaunchOptions& o, const JobPlan& plan, SignalWatch& signals, RunLogDir& logs,
                   const OutputConfig& output) {
  AgentJob job(o, plan, signals, logs, output);
  job.redirected = output.redirects.any() || output.tee.any();
  if (o.mode == RunMode::program && o.program_kind != ProgramKind::as_is) job.python = python_interpreter();
  job.command = worker_command(o, job.python);
  if (o.verbose) {
    if (job.python) note("python: " + job.python->path + " (" + job.python->reason + ")");
    std::string line;
    for (const auto& arg : job.command) line += (line.empty() ? "" : " ") + arg;
    note("each worker runs: " + line);
  }
  job.what = o.mode == RunMode::program ? program_name(job.command) : o.command.front();
  job.cpus = o.numa_binding != NumaBinding::none ? numa_cpu_sets(o.numa_binding, plan.nproc_per_node)
                                                 : cpu_shares(o.cpu_bind, plan.nproc_per_node, allowed_cpus());
  job.cpus_if_alone = o.numa_binding == NumaBinding::none && o.cpu_bind == CpuBind::auto_;
  if (plan.nproc_per_node > 1 && !std::getenv("OMP_NUM_THREADS") && o.mode == RunMode::program)
    note("warning: setting OMP_NUM_THREADS=1 for each of the " + std::to_string(plan.nproc_per_node) +
         " workers (it is unset), to avoid overloading the system; set it to tune your program's performance");
  job.base_env = current_environment();
  // --monitor-interval paces the watch of the other nodes; it also carries this agent's
  // heartbeat, so it is kept well inside the heartbeat timeout.
  job.watch_interval =
      std::clamp<std::chrono::milliseconds>(seconds(o.monitor_interval), std::chrono::milliseconds(1),
                                            std::min<std::chrono::milliseconds>(seconds(o.heartbeat_timeout) / 4,
                                                                                std::chrono::milliseconds(750)));
  return job;
}

// The job is over on this node after `out`, a failed or interrupted attempt: its exit status.
int conclude(const AgentJob& job, Rendezvous& rendezvous, const AttemptOutcome& out, int restart) {
  if (out.result.outcome == GroupOutcome::interrupted) {
    const std::string summary = format_interrupted(out.result.signal, out.result.ends, rendezvous.host(), job.what);
    std::cerr << "distrun: " << summary << std::flush;
    write_agent_error_file("distrun stopped by " + signal_abbrev(out.result.signal), summary, std::nullopt,
                           kStoppedBySignalExit);
    return kStoppedBySignalExit;
  }
  if (out.first) rendezvous.close(out.first);
  // Only where restarts were allowed: without them there was nothing to give up on.
  if (job.options.max_restarts > 0) note("error: giving up after " + std::to_string(restart) + " restart(s)");
  if (out.result.outcome == GroupOutcome::failed) {
    const WorkerFailure& f = *out.result.failure;
    write_agent_error_file("worker rank " + std::to_string(f.rank) + " failed: " + job.what, out.summary,
                           read_error_file(f.error_file), 1);
    // A scenario worker exits 2 when it refuses the scenario before joining (a fill value that
    // only its own rank computes, past what the launcher evaluated): bad input, so distrun's
    // status is that of bad input too.
    if (job.options.mode == RunMode::scenario && WIFEXITED(f.wait_status) && WEXITSTATUS(f.wait_status) == 2) return 2;
  } else {
    write_agent_error_file("job failed; first failure: " + (out.first ? out.first->summary() : std::string("unknown")),
                           "", std::nullopt, 1);
  }
  return 1;
}

// Why the workers restart: the job's first failure where nodes share one (a rank of this
// node, perhaps one found frozen after a rank gave up on it, or the kind's words for another
// node's failure), else this node's failed rank.
std::string restart_cause(const AttemptOutcome& out, const Rendezvous& rendezvous, int node_rank) {
  if (!out.first) return "rank " + std::to_string(out.result.failure->rank) + " failed";
  const FailureRecord& first = *out.first;
  if (first.node_rank == node_rank && first.rank >= 0)
    return "rank " + std::to_string(first.rank) + (first.frozen ? " was frozen" : " failed");
  return rendezvous.restart_reason(first);
}

// Meets the other nodes and runs attempts until the job succeeds, fails for good, or is
// stopped; returns distrun's exit status.
int restart_loop(const AgentJob& job, Rendezvous& rendezvous) {
  std::string log_error;
  int restart = 0;
  for (int attempt = 0;; ++attempt) {
    Assignment a;
    try {
      a = rendezvous.join(attempt, restart);
    } catch (const JobFailed& e) {
      rendezvous.acknowledge(attempt);
      print_job_failure(e.record());
      write_agent_error_file("job failed; first failure: " + e.record().summary(), "", std::nullopt, 1);
      return 1;
    } catch (const JobEndedWithoutUs& e) {
      note(e.what());  // nothing ran here and nothing failed: as for a job that needed no more nodes
      return 0;
    }
    attempt = a.round;
    restart = a.restart_count;
    const AttemptOutcome out = run_attempt(job, rendezvous, a, attempt, restart);
    if (log_error.empty()) log_error = out.log_error;
    if (out.result.outcome == GroupOutcome::succeeded && !out.first) {
      if (log_error.empty()) return 0;
      note("error: the workers succeeded but a log could not be written: " + log_error);
      write_agent_error_file("distrun: " + log_error, "", std::nullopt, 1);
      return 1;
    }
    // A node joining an elastic job restarts the others without using up a restart (torchrun).
    const bool joining = out.first && out.first->joining;
    if (out.result.outcome == GroupOutcome::interrupted || (out.first && out.first->final) ||
        (!joining && restart >= job.options.max_restarts))
      return conclude(job, rendezvous, out, restart);
    if (joining) {
      note("a node asks to join (" + out.first->host +
           "); restarting all workers in a new round with it (not counted against --max-restarts)");
      continue;
    }
    note(restart_cause(out, rendezvous, a.node_rank) + "; restarting all workers (restart " +
         std::to_string(restart + 1) + " of " + std::to_string(job.options.max_restarts) + ")");
    ++restart;
  }
}

}  // namespace

int run_agent(const LaunchOptions& o) {
  // The scenario is read once and checked before the signals are blocked, so that Ctrl-C or
  // SIGTERM ends distrun at once however long a hostile file takes to refuse.
  std::optional<scenario::Scenario> sc;
  if (o.mode == RunMode::scenario) sc = scenario::load_scenario(o.command.front());
  const JobPlan plan = plan_job(o, process_env(), sc ? sc->world_size : std::nullopt);
  const RendezvousOptions ro = rendezvous_options(o, rendezvous_secret(o, plan, process_env()));
  if (sc)
    if (auto done = check_scenario_first(o, *sc, plan, ro)) return *done;
  if (o.device && *o.device == "cuda") {
    // Said once, before any worker starts, rather than by every worker.
    std::string why;
    if (nccl::count_visible_cuda_devices(&why) == 0)
      throw ConfigError("--device cuda: no CUDA device is visible (" + why + ")");
  }
  // The workers see the devices this process sees: more of them on NCCL than devices would
  // meet in NCCL's "Duplicate GPU detected" on every rank.
  if (sc && scenario_backend(*sc, o.backend, o.device) == "nccl") nccl::check_launch_fits_devices(plan.nproc_per_node);
  // Blocks the signals before any thread exists (the rendezvous store runs one).
  SignalWatch signals(parse_signal_list(o.signals_to_handle));
  become_subreaper();
  const OutputConfig output = output_config(o);
  // Logs and each worker's TORCHELASTIC_ERROR_FILE live in a fresh folder per run: under
  // --log-dir (kept), else a private temporary one (kept only when it holds redirected logs,
  // as torchrun also writes those to a temporary folder when none is given).
  const bool redirected = output.redirects.any() || output.tee.any();
  RunLogDir logs(o.log_dir.empty() ? temporary_folder() : o.log_dir,
                 o.log_dir.empty() ? "distrun_" + plan.run_id : plan.run_id, o.log_dir.empty() && !redirected);
  if (o.log_dir.empty() && redirected) note("worker logs in " + logs.path());
  const AgentJob job = agent_job(o, plan, signals, logs, output);
  const std::unique_ptr<Rendezvous> rendezvous = make_rendezvous(plan, ro, signals);
  return restart_loop(job, *rendezvous);
}

}  // namespace distrun::launcher
