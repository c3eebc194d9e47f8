#include "agent.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>

#include "distrun/core/error.hpp"
#include "distrun/scenario/api.hpp"
#include "failure_report.hpp"
#include "job_plan.hpp"
#include "job_secret.hpp"
#include "rendezvous.hpp"
#include "signal_names.hpp"
#include "signal_watch.hpp"
#include "worker_env.hpp"
#include "worker_group.hpp"
#include "worker_shim.hpp"

namespace distrun::launcher {
namespace {

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

std::vector<std::string> worker_command(const LaunchOptions& o) {
  if (o.mode == RunMode::program) return o.command;
  std::vector<std::string> argv{worker_path(), o.command.front()};
  if (o.results) argv.insert(argv.end(), {"--results", *o.results});
  if (o.backend) argv.insert(argv.end(), {"--backend", *o.backend});
  if (o.timeout) argv.insert(argv.end(), {"--timeout", std::to_string(*o.timeout)});
  if (o.log_level) argv.insert(argv.end(), {"--log-level", *o.log_level});
  return argv;
}

void note(const std::string& text) { std::cerr << "distrun: " << text << std::endl; }

// The same line on every node: where the job failed first.
void print_job_failure(const FailureRecord& first) {
  std::cerr << "distrun: error: job failed; first failure: " << first.summary() << std::endl;
}

}  // namespace

int run_agent(const LaunchOptions& o) {
  // Blocks the signals before any thread exists (the rendezvous store runs one).
  SignalWatch signals;

  std::optional<int> declared_world;
  if (o.mode == RunMode::scenario) declared_world = scenario_world_size(o.command.front());
  JobPlan plan = plan_job(o, process_env(), declared_world);
  std::optional<std::string> secret = load_job_secret(o.rdzv_secret_file, process_env());
  if (!plan.single_node() && !secret && !o.check_only) throw ConfigError(missing_secret_message());
  if (o.mode == RunMode::scenario) {
    int world = plan.nproc_per_node * plan.nnodes;  // static rendezvous: equal nodes assumed here
    check_scenario_file(o.command.front(), world);
    if (o.check_only) {
      std::cout << o.command.front() << ": ok (world_size " << world << ")" << std::endl;
      return 0;
    }
  }
  OutputConfig output;
  output.redirects = StdSpec::parse(o.redirects, "--redirects");
  output.tee = StdSpec::parse(o.tee, "--tee");
  output.console_ranks = parse_local_ranks_filter(o.local_ranks_filter);
  std::string log_dir = o.log_dir;
  if (log_dir.empty() && (output.redirects.any() || output.tee.any())) {
    // torchrun also writes redirected streams to a temporary folder when none is given.
    char tmpl[] = "/tmp/distrun_logs_XXXXXX";
    if (!mkdtemp(tmpl)) throw Error("cannot create a temporary log folder in /tmp");
    log_dir = tmpl;
    note("worker logs in " + log_dir);
  }
  const std::vector<std::string> command = worker_command(o);
  const std::string what = o.command.front();

  RendezvousOptions ro;
  ro.timeout = std::chrono::milliseconds(int64_t(o.rdzv_timeout * 1000));
  ro.secret = secret.value_or("");
  ro.bind_all = o.rdzv_bind_all;
  if (o.workers_port) ro.workers_port = uint16_t(*o.workers_port);
  // distrun-worker takes the bound socket; any other program binds MASTER_PORT itself.
  ro.hand_socket = o.mode == RunMode::scenario;
  ro.scenario = o.mode == RunMode::scenario;
  ro.results_given = o.results.has_value();
  Rendezvous rendezvous(plan, ro, signals);
  const std::string host = rendezvous.host();
  const EnvMap base_env = current_environment();
  int restart = 0;
  for (int attempt = 0;; ++attempt) {
    Assignment a;
    try {
      a = rendezvous.join(attempt);
    } catch (const JobFailed& e) {
      rendezvous.acknowledge(attempt);
      print_job_failure(e.record());
      return 1;
    }
    output.attempt_dir = log_dir.empty() ? "" : log_dir + "/" + plan.run_id + "/attempt_" + std::to_string(restart);
    OutputRouter router(output, plan.nproc_per_node, a.rank_offset);

    std::vector<WorkerSpec> specs;
    for (int local = 0; local < plan.nproc_per_node; ++local) {
      WorkerIdentity id;
      id.rank = a.rank_offset + local;
      id.local_rank = local;
      id.world_size = a.world_size;
      id.local_world_size = plan.nproc_per_node;
      id.group_rank = plan.node_rank;
      id.group_world_size = plan.nnodes;
      id.role_name = o.role;
      id.master_addr = a.master_addr;
      id.master_port = a.master_port;
      id.restart_count = restart;
      id.max_restarts = o.max_restarts;
      id.run_id = plan.run_id;
      id.store_secret = a.secret;
      EnvMap env = worker_environment(base_env, id);
      WorkerSpec spec{id.rank, local, command, {}, -1};
      // Global rank 0 serves the workers' store on the socket this agent bound.
      if (id.rank == 0 && a.listen_fd >= 0) {
        spec.listen_fd = a.listen_fd;
        env["DISTRUN_STORE_LISTEN_FD"] = std::to_string(kShimListenFd);
      }
      spec.envp = to_envp(env);
      specs.push_back(std::move(spec));
    }

    GroupResult result;
    std::optional<FailureRecord> first;  // the job's first failure, once known
    {
      WorkerGroup group(specs, router, signals, std::chrono::milliseconds(int64_t(o.stop_grace * 1000)));
      std::function<bool()> peer_poll;
      std::function<void(const GroupResult&)> on_failure;
      if (rendezvous.multi_node()) {
        peer_poll = [&] {
          first = rendezvous.watch(attempt);
          return first.has_value();
        };
        // Told to the other nodes the moment it is seen, while ours are still being stopped.
        on_failure = [&](const GroupResult& r) {
          FailureRecord mine;
          mine.host = host;
          mine.node_rank = plan.node_rank;
          if (r.outcome == GroupOutcome::interrupted) {
            mine.final = true;
            mine.cause = "distrun stopped by " + signal_abbrev(r.signal);
          } else {
            mine.rank = r.failure->rank;
            mine.cause = "worker (local rank " + std::to_string(r.failure->local_rank) + ") ended with " +
                         describe_wait_status(r.failure->wait_status);
          }
          first = rendezvous.report_failure(attempt, mine);
        };
      }
      result = group.run(peer_poll, std::chrono::milliseconds(200), on_failure);
    }
    if (result.outcome == GroupOutcome::succeeded) {
      first = rendezvous.finish(attempt);
      if (!first) return 0;
    }
    if (result.outcome == GroupOutcome::failed)
      std::cerr << "distrun: error: " << format_failure(*result.failure, host, what) << std::flush;
    if (rendezvous.multi_node() && first) {
      rendezvous.acknowledge(attempt);
      print_job_failure(*first);
    }
    if (result.outcome == GroupOutcome::interrupted) {
      note(std::string("stopped by signal ") + std::to_string(result.signal) + ", workers stopped");
      return 128 + result.signal;
    }
    if ((first && first->final) || restart >= o.max_restarts) {
      if (result.outcome != GroupOutcome::failed || o.max_restarts > 0)
        note("error: giving up after " + std::to_string(restart) + " restart(s)");
      return 1;
    }
    note((result.outcome == GroupOutcome::failed ? "rank " + std::to_string(result.failure->rank) + " failed"
                                                 : std::string("another node failed")) +
         "; restarting all workers (restart " + std::to_string(restart + 1) + " of " + std::to_string(o.max_restarts) + ")");
    ++restart;
  }
}

}  // namespace distrun::launcher
