#include "agent.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "distrun/core/error.hpp"
#include "distrun/nccl/device_choice.hpp"
#include "distrun/scenario/api.hpp"
#include "distrun/scenario/loader.hpp"
#include "cpu_bind.hpp"
#include "failure_report.hpp"
#include "flight_report.hpp"
#include "job_plan.hpp"
#include "job_secret.hpp"
#include "log_dir.hpp"
#include "numa_binding.hpp"
#include "rendezvous.hpp"
#include "signal_names.hpp"
#include "signal_watch.hpp"
#include "subreaper.hpp"
#include "worker_env.hpp"
#include "worker_group.hpp"
#include "worker_shim.hpp"

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

// The same line on every node: where the job failed first.
void print_job_failure(const FailureRecord& first) {
  std::cerr << "distrun: error: job failed; first failure: " << first.summary() << std::endl;
}

// How long a failure summary waits for the other nodes' flight reports. Every live agent
// publishes its own the moment it learns of the failure, so this only bounds the wait for a
// node that is gone.
constexpr std::chrono::milliseconds kFlightGather{2000};

std::vector<RankFlight> local_flights() {
  const FlightFile* file = made_flight_file();
  return file ? file->read() : std::vector<RankFlight>{};
}

// The flight recorder's table for the failure summary: this node's ranks, and with several
// nodes every other node's from its report in the store ("" when nothing was left unfinished).
std::string flight_table(Rendezvous& rendezvous, int attempt, int node_rank) {
  std::vector<RankFlight> mine = local_flights();
  if (!rendezvous.multi_node()) return any_unfinished(mine) ? describe_flights(mine) : "";
  const auto texts = rendezvous.gather(attempt, "flights", kFlightGather);
  const auto& hosts = rendezvous.node_hosts();
  const auto& nproc = rendezvous.node_nproc();
  std::vector<NodeFlights> nodes;
  int first_rank = 0;
  for (size_t n = 0; n < texts.size() && n < hosts.size() && n < nproc.size(); ++n) {
    NodeFlights node{int(n), hosts[n], first_rank, nproc[n], std::nullopt};
    first_rank += nproc[n];
    if (int(n) == node_rank) {
      node.report = FlightReport{mine, 0};
    } else if (texts[n]) {
      try {
        node.report = decode_flight_report(*texts[n]);
      } catch (const MalformedMessage&) {
        // shown as "no report from node N"
      }
    }
    nodes.push_back(std::move(node));
  }
  return describe_job_flights(nodes);
}

}  // namespace

int run_agent(const LaunchOptions& o) {
  // The scenario is read once and checked before the signals are blocked, so that Ctrl-C or
  // SIGTERM ends distrun at once however long a hostile file takes to refuse.
  std::optional<scenario::Scenario> sc;
  if (o.mode == RunMode::scenario) sc = scenario::load_scenario(o.command.front());
  JobPlan plan = plan_job(o, process_env(), sc ? sc->world_size : std::nullopt);
  if (plan.elastic() && o.mode == RunMode::scenario)
    throw ConfigError("--nnodes " + o.nnodes +
                      ": an elastic range runs programs only (a scenario is checked for one "
                      "world size before it starts); give N nodes");
  std::optional<std::string> secret = load_job_secret(o.rdzv_secret_file, process_env());
  if (!plan.single_node() && !secret && !o.check_only) throw ConfigError(missing_secret_message());
  if (!plan.single_node() && secret)
    check_secret_strength(*secret, o.rdzv_secret_file.empty() ? "DISTRUN_STORE_SECRET"
                                                              : "--rdzv-secret-file " + o.rdzv_secret_file);
  RendezvousOptions ro;
  ro.timeout = std::chrono::milliseconds(int64_t(o.rdzv_timeout * 1000));
  ro.secret = secret.value_or("");
  ro.bind_all = o.rdzv_bind_all;
  if (o.rdzv_backend == "etcd" || o.rdzv_backend == "etcd-v2") ro.etcd_endpoints = o.rdzv_endpoint;
  if (o.workers_port) ro.workers_port = uint16_t(*o.workers_port);
  // distrun-worker takes the bound socket; any other program binds MASTER_PORT itself.
  ro.hand_socket = o.mode == RunMode::scenario;
  ro.scenario = o.mode == RunMode::scenario;
  ro.results_given = o.results.has_value();
  ro.last_call = std::chrono::milliseconds(int64_t(o.last_call_timeout * 1000));
  ro.stop_grace = std::chrono::milliseconds(int64_t(o.stop_grace * 1000));
  ro.heartbeat_timeout = std::chrono::milliseconds(int64_t(o.heartbeat_timeout * 1000));
  if (sc) {
    int world = plan.nproc_per_node * plan.nnodes;  // static rendezvous: equal nodes assumed here
    try {
      check_scenario(*sc, world, plan.nproc_per_node);
      if (o.results) check_results_path(*o.results, *sc);
    } catch (const ConfigError& e) {
      if (!o.check_only && !o.explain) {
        // Signals are watched only while node 0 is told (at most 5 s), not while checking.
        SignalWatch telling(parse_signal_list(o.signals_to_handle));
        tell_node0_cannot_join(plan, ro, telling, e.what());
      }
      throw;
    }
    if (o.explain) {
      explain_scenario(*sc, world, std::cout, ::isatty(STDOUT_FILENO) && !std::getenv("NO_COLOR"));
      return 0;
    }
    if (o.check_only) {
      std::cout << o.command.front() << ": ok (world_size " << world << ")" << std::endl;
      return 0;
    }
  }
  if (o.device && *o.device == "cuda") {
    // Said once, before any worker starts, rather than by every worker.
    std::string why;
    if (nccl::count_visible_cuda_devices(&why) == 0)
      throw ConfigError("--device cuda: no CUDA device is visible (" + why + ")");
  }
  // Blocks the signals before any thread exists (the rendezvous store runs one).
  SignalWatch signals(parse_signal_list(o.signals_to_handle));
  become_subreaper();
  OutputConfig output;
  output.redirects = StdSpec::parse(o.redirects, "--redirects");
  output.tee = StdSpec::parse(o.tee, "--tee");
  output.console_ranks = parse_local_ranks_filter(o.local_ranks_filter);
  // Logs and each worker's TORCHELASTIC_ERROR_FILE live in a fresh folder per run: under
  // --log-dir (kept), else a private temporary one (kept only when it holds redirected logs,
  // as torchrun also writes those to a temporary folder when none is given).
  const bool redirected = output.redirects.any() || output.tee.any();
  RunLogDir logs(o.log_dir.empty() ? temporary_folder() : o.log_dir,
                 o.log_dir.empty() ? "distrun_" + plan.run_id : plan.run_id, o.log_dir.empty() && !redirected);
  if (o.log_dir.empty() && redirected) note("worker logs in " + logs.path());
  std::optional<Interpreter> python;
  if (o.mode == RunMode::program && o.program_kind != ProgramKind::as_is) python = python_interpreter();
  const std::vector<std::string> command = worker_command(o, python);
  if (o.verbose) {
    if (python) note("python: " + python->path + " (" + python->reason + ")");
    std::string line;
    for (const auto& arg : command) line += (line.empty() ? "" : " ") + arg;
    note("each worker runs: " + line);
  }
  const std::string what = o.mode == RunMode::program ? program_name(command) : o.command.front();
  // --cpu-bind auto binds only the ranks of a single-node job: agents of several nodes may
  // share a host (SLURM steps packed on one node, tests), and each would hand out the same CPUs.
  const CpuBind bind = o.cpu_bind == CpuBind::auto_ && !plan.single_node() ? CpuBind::none : o.cpu_bind;
  const auto cpus = o.numa_binding != NumaBinding::none ? numa_cpu_sets(o.numa_binding, plan.nproc_per_node)
                                                        : cpu_shares(bind, plan.nproc_per_node, allowed_cpus());
  if (plan.nproc_per_node > 1 && !std::getenv("OMP_NUM_THREADS") && o.mode == RunMode::program)
    note("warning: setting OMP_NUM_THREADS=1 for each of the " + std::to_string(plan.nproc_per_node) +
         " workers (it is unset), to avoid overloading the system; set it to tune your program's performance");
  std::string log_error;

  Rendezvous rendezvous(plan, ro, signals);
  const std::string host = rendezvous.host();
  const EnvMap base_env = current_environment();
  // --monitor-interval paces the watch of the other nodes; it also carries this agent's
  // heartbeat, so it is kept well inside the heartbeat timeout.
  const auto watch_interval =
      std::clamp<std::chrono::milliseconds>(std::chrono::milliseconds(int64_t(o.monitor_interval * 1000)),
                                            std::chrono::milliseconds(1),
                                            std::min<std::chrono::milliseconds>(ro.heartbeat_timeout / 4,
                                                                                std::chrono::milliseconds(750)));
  int restart = 0;
  for (int attempt = 0;; ++attempt) {
    Assignment a;
    try {
      a = rendezvous.join(attempt);
    } catch (const JobFailed& e) {
      rendezvous.acknowledge(attempt);
      print_job_failure(e.record());
      write_agent_error_file("job failed; first failure: " + e.record().summary(), "", std::nullopt, 1);
      return 1;
    } catch (const JobEndedWithoutUs& e) {
      note(e.what());  // nothing ran here and nothing failed: as for a job that needed no more nodes
      return 0;
    }
    if (plan.elastic()) {
      // Elastic: the round decides the attempt, this node's rank and the job's restart count.
      attempt = a.round;
      restart = a.restart_count;
      if (rendezvous.multi_node())
        note("elastic round " + std::to_string(a.round) + ": node rank " + std::to_string(a.node_rank) + " of " +
             std::to_string(a.nnodes) + " nodes, world size " + std::to_string(a.world_size));
    }
    // The logs' attempt_K folder: the restart count, as torchrun; elastic: the round, so that a
    // restart for a node that joined (same count) does not overwrite the earlier round's logs.
    const int log_attempt = plan.elastic() ? a.round : restart;
    OutputConfig console = output;
    console.prefix = a.world_size > 1 || output.tee.any();  // torchrun prefixes a lone rank only with --tee
    OutputRouter router(console, plan.nproc_per_node, a.rank_offset, redirected ? &logs : nullptr, log_attempt);
    // distrun's own output is a terminal: each worker gets one of its own, of the same size (so
    // isatty() and the columns are what the program sees alone, and its stdout and stderr keep
    // their order), unless a stream goes to the log files, which keep the two apart.
    std::optional<winsize> terminal;
    if (winsize size{};
        !redirected && isatty(STDOUT_FILENO) && isatty(STDERR_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0)
      terminal = size;
    const std::string ifname = socket_interface(a.master_addr, o.local_addr);

    std::vector<WorkerSpec> specs;
    for (int local = 0; local < plan.nproc_per_node; ++local) {
      WorkerIdentity id;
      id.rank = a.rank_offset + local;
      id.local_rank = local;
      id.world_size = a.world_size;
      id.local_world_size = plan.nproc_per_node;
      id.group_rank = a.node_rank;
      id.group_world_size = a.nnodes;
      id.role_name = o.role;
      id.master_addr = a.master_addr;
      id.master_port = a.master_port;
      id.restart_count = restart;
      id.max_restarts = o.max_restarts;
      id.run_id = plan.run_id;
      id.store_secret = a.secret;
      id.error_file = logs.make_rank_dir(log_attempt, local) + "/error.json";
      id.socket_ifname = ifname;
      // A restart after another node's failure keeps the restart count, so the folder is reused.
      unlink(id.error_file.c_str());
      id.flight_recorder = flight_recorder_path(plan.nproc_per_node);
      EnvMap env = worker_environment(base_env, id);
      WorkerSpec spec;
      spec.rank = id.rank;
      spec.local_rank = local;
      spec.argv = command;
      // Global rank 0 serves the workers' store on the socket this agent bound.
      if (id.rank == 0 && a.listen_fd >= 0) {
        spec.listen_fd = a.listen_fd;
        env["DISTRUN_STORE_LISTEN_FD"] = std::to_string(kShimListenFd);
      }
      spec.envp = to_envp(env);
      spec.stdin_pipe = o.stdin_rank == local;
      spec.terminal = terminal;
      spec.cpus = cpus.empty() ? std::vector<int>{} : cpus[size_t(local)];
      spec.shown_name = what;
      if (python) spec.interpreter = python->path + " (" + python->reason + ")";
      spec.error_file = id.error_file;
      specs.push_back(std::move(spec));
    }

    GroupResult result;
    std::optional<FailureRecord> first;  // the job's first failure, once known
    std::string summary;                 // this node's own failure, for the console and TORCHELASTIC_ERROR_FILE
    // Once the failure is known, this node's flight records go to the store at once, for the
    // other nodes' summaries.
    bool flights_published = false;
    auto publish_flights = [&] {
      if (flights_published || !rendezvous.multi_node()) return;
      flights_published = true;
      rendezvous.publish(attempt, "flights", encode_flight_report(local_flights()));
    };
    {
      WorkerGroup group(specs, router, signals, std::chrono::milliseconds(int64_t(o.stop_grace * 1000)));
      std::function<bool()> peer_poll;
      if (rendezvous.multi_node())
        peer_poll = [&] {
          first = rendezvous.watch(attempt);
          if (first) publish_flights();
          return first.has_value();
        };
      // Seen the moment it happens, while the other workers are still being stopped (which may
      // take up to --stop-grace: a checkpoint being saved): the summary comes first, and the
      // other nodes are told.
      auto on_failure = [&](const GroupResult& r) {
        if (r.outcome == GroupOutcome::failed) {
          if (read_error_file(r.failure->error_file)) logs.keep();  // the summary names it
          // One node: the table of the collectives the others are stuck in, read right now.
          // Several: the other nodes' tables follow once gathered, after the stop.
          summary = format_failure(*r.failure, host,
                                   rendezvous.multi_node() ? "" : flight_table(rendezvous, attempt, a.node_rank));
          // A failure a restart recovers from is told, but not as an error (torchrun logs it as info).
          const bool restarts = !rendezvous.multi_node() && restart < o.max_restarts;
          std::cerr << (restarts ? "distrun: " : "distrun: error: ") << summary << std::flush;
        }
        if (rendezvous.multi_node()) {
          FailureRecord mine;
          mine.host = host;
          mine.node_rank = a.node_rank;
          if (r.outcome == GroupOutcome::interrupted) {
            // Elastic: a node that leaves is a membership change while MIN remain, unless it
            // hosts the rendezvous (its store goes with it; not so with etcd).
            mine.final =
                !plan.elastic() || (a.node_rank == 0 && ro.etcd_endpoints.empty()) || a.nnodes - 1 < plan.min_nodes;
            mine.cause = "distrun stopped by " + signal_abbrev(r.signal) + (mine.final ? "" : " (the node left)");
          } else {
            mine.rank = r.failure->rank;
            mine.cause = "worker (local rank " + std::to_string(r.failure->local_rank) + ") ended with " +
                         describe_wait_status(r.failure->wait_status);
          }
          first = rendezvous.report_failure(attempt, mine);
          publish_flights();
        }
      };
      result = group.run(peer_poll, watch_interval, on_failure);
    }
    end_adopted_children();  // the group has reaped its workers: what is left was orphaned below
    if (log_error.empty()) log_error = router.log_error();

    if (result.outcome == GroupOutcome::succeeded) {
      first = rendezvous.finish(attempt);
      if (first) publish_flights();
      if (!first) {
        if (log_error.empty()) return 0;
        note("error: the workers succeeded but a log could not be written: " + log_error);
        write_agent_error_file("distrun: " + log_error, "", std::nullopt, 1);
        return 1;
      }
    }
    // Gathered before acknowledge(): node 0 keeps the store up until the others have read.
    // One node's table went with the summary; several nodes' is gathered only now.
    const std::string flights = result.outcome == GroupOutcome::interrupted || !rendezvous.multi_node()
                                    ? ""
                                    : flight_table(rendezvous, attempt, a.node_rank);
    if (rendezvous.multi_node() && first) {
      rendezvous.acknowledge(attempt);
      if (!first->joining) {
        print_job_failure(*first);
        if (!flights.empty()) std::cerr << "distrun: " << flights << std::flush;
      }
    }
    if (result.outcome == GroupOutcome::interrupted) {
      summary = format_interrupted(result.signal, result.ends, host, what);
      std::cerr << "distrun: " << summary << std::flush;
      write_agent_error_file("distrun stopped by " + signal_abbrev(result.signal), summary, std::nullopt,
                             kStoppedBySignalExit);
      return kStoppedBySignalExit;
    }
    // A node joining an elastic job restarts the others without using up a restart (torchrun).
    const bool joining = plan.elastic() && first && first->joining;
    if ((first && first->final) || (!joining && restart >= o.max_restarts)) {
      if (plan.elastic() && first) rendezvous.close(first);
      // Only where restarts were allowed: without them there was nothing to give up on.
      if (o.max_restarts > 0) note("error: giving up after " + std::to_string(restart) + " restart(s)");
      if (result.outcome == GroupOutcome::failed) {
        const WorkerFailure& f = *result.failure;
        write_agent_error_file("worker rank " + std::to_string(f.rank) + " failed: " + what, summary,
                               read_error_file(f.error_file), 1);
      } else {
        write_agent_error_file("job failed; first failure: " + (first ? first->summary() : std::string("unknown")), "",
                               std::nullopt, 1);
      }
      return 1;
    }
    if (joining) {
      note("a node asks to join (" + first->host +
           "); restarting all workers in a new round with it (not counted "
           "against --max-restarts)");
      continue;
    }
    note((result.outcome == GroupOutcome::failed ? "rank " + std::to_string(result.failure->rank) + " failed"
          : plan.elastic()                       ? "node " + first->host + " failed or left"
                                                 : std::string("another node failed")) +
         "; restarting all workers (restart " + std::to_string(restart + 1) + " of " + std::to_string(o.max_restarts) +
         ")");
    ++restart;
  }
}

}  // namespace distrun::launcher
