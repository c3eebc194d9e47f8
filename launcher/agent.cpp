#include "agent.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "distrun/core/error.hpp"
#include "distrun/scenario/api.hpp"
#include "failure_report.hpp"
#include "job_plan.hpp"
#include "rendezvous.hpp"
#include "signal_watch.hpp"
#include "worker_env.hpp"
#include "worker_group.hpp"

namespace distrun::launcher {
namespace {

constexpr int kPortRetries = 3;  // lost races for a picked port, not counted as restarts

std::string this_host() {
  char buf[256] = {};
  gethostname(buf, sizeof buf - 1);
  return buf;
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

std::vector<std::string> worker_command(const LaunchOptions& o) {
  if (o.mode == RunMode::program) return o.command;
  std::vector<std::string> argv{worker_path(), o.command.front()};
  if (o.results) argv.insert(argv.end(), {"--results", *o.results});
  if (o.backend) argv.insert(argv.end(), {"--backend", *o.backend});
  if (o.device) argv.insert(argv.end(), {"--device", *o.device});
  if (o.timeout) argv.insert(argv.end(), {"--timeout", std::to_string(*o.timeout)});
  if (o.log_level) argv.insert(argv.end(), {"--log-level", *o.log_level});
  return argv;
}

void note(const std::string& text) { std::cerr << "distrun: " << text << std::endl; }

}  // namespace

int run_agent(const LaunchOptions& o) {
  // Blocks the signals before any thread exists (the rendezvous store runs one).
  SignalWatch signals;

  std::optional<int> declared_world;
  if (o.mode == RunMode::scenario) declared_world = scenario_world_size(o.command.front());
  JobPlan plan = plan_job(o, process_env(), declared_world);
  if (o.mode == RunMode::scenario) {
    int world = plan.nproc_per_node * plan.nnodes;  // static rendezvous: equal nodes assumed here
    check_scenario_file(o.command.front(), world, plan.nproc_per_node);
    if (o.results) check_results_path(*o.results);
    if (o.explain) {
      explain_scenario_file(o.command.front(), world, std::cout, ::isatty(STDOUT_FILENO) && !std::getenv("NO_COLOR"));
      return 0;
    }
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
  const std::string host = this_host();

  Rendezvous rendezvous(plan, std::chrono::milliseconds(int64_t(o.rdzv_timeout * 1000)));
  const EnvMap base_env = current_environment();
  int port_retries = 0;
  int restart = 0;
  for (int attempt = 0;; ++attempt) {
    Assignment a = rendezvous.join(attempt);
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
      id.flight_recorder = flight_file(plan.nproc_per_node).path();
      specs.push_back({id.rank, local, command, to_envp(worker_environment(base_env, id))});
    }

    GroupResult result;
    {
      WorkerGroup group(specs, router, signals, std::chrono::milliseconds(int64_t(o.stop_grace * 1000)));
      std::function<bool()> peer_poll;
      if (!plan.single_node()) peer_poll = [&] { return rendezvous.peer_failed(attempt); };
      result = group.run(peer_poll);
    }

    switch (result.outcome) {
      case GroupOutcome::succeeded:
        if (rendezvous.finish(attempt)) return 0;
        note("another node failed in attempt " + std::to_string(restart));
        break;
      case GroupOutcome::interrupted:
        note(std::string("stopped by signal ") + std::to_string(result.signal) + ", workers stopped");
        return 128 + result.signal;
      case GroupOutcome::peer_failed:
        note("another node reported a failure; local workers stopped");
        break;
      case GroupOutcome::failed: {
        const WorkerFailure& f = *result.failure;
        rendezvous.report_failure(attempt, "rank " + std::to_string(f.rank));
        if (a.port_was_picked && plan.single_node() && f.rank == 0 && port_retries < kPortRetries &&
            looks_like_port_taken(f)) {
          ++port_retries;
          note("port " + std::to_string(a.master_port) + " was taken before rank 0 bound it; retrying with another");
          continue;
        }
        if (restart >= o.max_restarts) {
          std::cerr << "distrun: error: " << format_failure(f, host, what) << std::flush;
          return 1;
        }
        note("rank " + std::to_string(f.rank) + " failed; restarting all workers (restart " +
             std::to_string(restart + 1) + " of " + std::to_string(o.max_restarts) + ")");
        ++restart;
        continue;
      }
    }
    if (restart >= o.max_restarts) {
      note("error: giving up after " + std::to_string(restart) + " restart(s)");
      return 1;
    }
    ++restart;
  }
}

}  // namespace distrun::launcher
