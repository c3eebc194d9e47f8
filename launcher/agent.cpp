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
#include "log_dir.hpp"
#include "numa_binding.hpp"
#include "rendezvous.hpp"
#include "signal_names.hpp"
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
  if (o.mode == RunMode::program) return program_argv(o);
  std::vector<std::string> argv{worker_path(), o.command.front()};
  if (o.results) argv.insert(argv.end(), {"--results", *o.results});
  if (o.backend) argv.insert(argv.end(), {"--backend", *o.backend});
  if (o.timeout) argv.insert(argv.end(), {"--timeout", std::to_string(*o.timeout)});
  if (o.log_level) argv.insert(argv.end(), {"--log-level", *o.log_level});
  return argv;
}

void note(const std::string& text) { std::cerr << "distrun: " << text << std::endl; }

}  // namespace

int run_agent(const LaunchOptions& o) {
  // Blocks the signals before any thread exists (the rendezvous store runs one).
  SignalWatch signals(parse_signal_list(o.signals_to_handle));

  std::optional<int> declared_world;
  if (o.mode == RunMode::scenario) declared_world = scenario_world_size(o.command.front());
  JobPlan plan = plan_job(o, process_env(), declared_world);
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
  // Logs and each worker's TORCHELASTIC_ERROR_FILE live in a fresh folder per run: under
  // --log-dir (kept), else a private temporary one (kept only when it holds redirected logs,
  // as torchrun also writes those to a temporary folder when none is given).
  const bool redirected = output.redirects.any() || output.tee.any();
  const char* tmp = std::getenv("TMPDIR");
  RunLogDir logs(o.log_dir.empty() ? (tmp && *tmp ? tmp : "/tmp") : o.log_dir,
                 o.log_dir.empty() ? "distrun_" + plan.run_id : plan.run_id, o.log_dir.empty() && !redirected);
  if (o.log_dir.empty() && redirected) note("worker logs in " + logs.path());
  const std::vector<std::string> command = worker_command(o);
  const std::string what = o.mode == RunMode::program ? program_name(command) : o.command.front();
  const std::string host = this_host();
  const auto cpus = numa_cpu_sets(o.numa_binding, plan.nproc_per_node);
  std::string log_error;

  Rendezvous rendezvous(plan, std::chrono::milliseconds(int64_t(o.rdzv_timeout * 1000)));
  const EnvMap base_env = current_environment();
  int port_retries = 0;
  int restart = 0;
  for (int attempt = 0;; ++attempt) {
    Assignment a = rendezvous.join(attempt);
    OutputRouter router(output, plan.nproc_per_node, a.rank_offset, redirected || !o.log_dir.empty() ? &logs : nullptr, restart);
    const std::string ifname = socket_interface(a.master_addr, o.local_addr);

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
      id.error_file = logs.make_rank_dir(restart, local) + "/error.json";
      id.socket_ifname = ifname;
      unlink(id.error_file.c_str());  // a port retry reuses the attempt's folder
      WorkerSpec spec{id.rank, local, command, to_envp(worker_environment(base_env, id))};
      spec.stdin_pipe = o.stdin_rank == local;
      spec.cpus = cpus.empty() ? std::vector<int>{} : cpus[size_t(local)];
      spec.shown_name = what;
      spec.error_file = id.error_file;
      specs.push_back(std::move(spec));
    }

    GroupResult result;
    {
      WorkerGroup group(specs, router, signals, std::chrono::milliseconds(int64_t(o.stop_grace * 1000)));
      std::function<bool()> peer_poll;
      if (!plan.single_node()) peer_poll = [&] { return rendezvous.peer_failed(attempt); };
      result = group.run(peer_poll, std::chrono::milliseconds(std::max<int64_t>(1, int64_t(o.monitor_interval * 1000))));
    }
    if (log_error.empty()) log_error = router.log_error();

    switch (result.outcome) {
      case GroupOutcome::succeeded:
        if (rendezvous.finish(attempt)) {
          if (log_error.empty()) return 0;
          note("error: the workers succeeded but a log could not be written: " + log_error);
          write_agent_error_file("distrun: " + log_error, "", std::nullopt, 1);
          return 1;
        }
        note("another node failed in attempt " + std::to_string(restart));
        break;
      case GroupOutcome::interrupted: {
        std::string summary = format_interrupted(result.signal, result.ends, host, what);
        std::cerr << "distrun: " << summary << std::flush;
        write_agent_error_file("distrun stopped by " + signal_abbrev(result.signal), summary, std::nullopt,
                               128 + result.signal);
        return 128 + result.signal;
      }
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
          std::string summary = format_failure(f, host);
          std::cerr << "distrun: error: " << summary << std::flush;
          write_agent_error_file("worker rank " + std::to_string(f.rank) + " failed: " + what, summary,
                                 read_error_file(f.error_file), 1);
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
