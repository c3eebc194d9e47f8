#include "attempt.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <iostream>

#include "failure_report.hpp"
#include "flight_report.hpp"
#include "signal_names.hpp"
#include "subreaper.hpp"
#include "worker_shim.hpp"

namespace distrun::launcher {
namespace {

// How long a failure summary waits for the other nodes' flight reports. Every live agent
// publishes its own the moment it learns of the failure, so this only bounds the wait for a
// node that is gone.
constexpr std::chrono::milliseconds kFlightGather{2000};

std::vector<RankFlight> local_flights() {
  const FlightFile* file = made_flight_file();
  return file ? file->read() : std::vector<RankFlight>{};
}

// The flight recorder's table of this node's ranks alone ("" when nothing was left unfinished).
std::string local_flight_table() {
  std::vector<RankFlight> mine = local_flights();
  return any_unfinished(mine) ? describe_flights(mine) : "";
}

// The table of every node's ranks: this node's, and every other node's from its report in the
// rendezvous ("" when nothing was left unfinished).
std::string job_flight_table(Rendezvous& rendezvous, int attempt, int node_rank) {
  const auto texts = rendezvous.gather(attempt, "flights", kFlightGather);
  const auto& hosts = rendezvous.node_hosts();
  const auto& nproc = rendezvous.node_nproc();
  std::vector<NodeFlights> nodes;
  int first_rank = 0;
  for (size_t n = 0; n < texts.size() && n < hosts.size() && n < nproc.size(); ++n) {
    NodeFlights node{int(n), hosts[n], first_rank, nproc[n], std::nullopt};
    first_rank += nproc[n];
    if (int(n) == node_rank) {
      node.report = FlightReport{local_flights(), 0};
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

// distrun's own output is a terminal: each worker gets one of its own, of the same size (so
// isatty() and the columns are what the program sees alone, and its stdout and stderr keep
// their order), unless a stream goes to the log files, which keep the two apart.
std::optional<winsize> workers_terminal(bool redirected) {
  winsize size{};
  if (!redirected && isatty(STDOUT_FILENO) && isatty(STDERR_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0)
    return size;
  return std::nullopt;
}

// --cpu-bind auto binds the ranks of an agent alone on its host: agents of several nodes
// on one host (SLURM steps packed on one node, tests) would each hand out the same CPUs. The
// attempt's plan says which host every node is on.
bool binds_cpus(const AgentJob& job, const Rendezvous& rendezvous) {
  if (job.cpus.empty()) return false;
  if (!job.cpus_if_alone) return true;
  const auto& hosts = rendezvous.node_hosts();
  return std::count(hosts.begin(), hosts.end(), rendezvous.host()) <= 1;
}

WorkerSpec worker_spec(const AgentJob& job, const Assignment& a, int local, int restart,
                       const std::optional<winsize>& terminal, bool bind) {
  const LaunchOptions& o = job.options;
  WorkerIdentity id;
  id.rank = a.rank_offset + local;
  id.local_rank = local;
  id.world_size = a.world_size;
  id.local_world_size = job.plan.nproc_per_node;
  id.group_rank = a.node_rank;
  id.group_world_size = a.nnodes;
  id.role_name = o.role;
  id.master_addr = a.master_addr;
  id.master_port = a.master_port;
  id.restart_count = restart;
  id.max_restarts = o.max_restarts;
  id.run_id = job.plan.run_id;
  id.store_secret = a.secret;
  id.error_file = job.logs.make_rank_dir(a.log_attempt, local) + "/error.json";
  id.socket_ifname = socket_interface(a.master_addr, o.local_addr);
  // A restart after another node's failure keeps the restart count, so the folder is reused.
  unlink(id.error_file.c_str());
  id.flight_recorder = flight_recorder_path(job.plan.nproc_per_node);
  EnvMap env = worker_environment(job.base_env, id);
  WorkerSpec spec;
  spec.rank = id.rank;
  spec.local_rank = local;
  spec.argv = job.command;
  // Global rank 0 serves the workers' store on the socket this agent bound.
  if (id.rank == 0 && a.listen_fd >= 0) {
    spec.listen_fd = a.listen_fd;
    env["DISTRUN_STORE_LISTEN_FD"] = std::to_string(kShimListenFd);
  }
  spec.envp = to_envp(env);
  spec.stdin_pipe = o.stdin_rank == local;
  spec.terminal = terminal;
  spec.cpus = bind ? job.cpus[size_t(local)] : std::vector<int>{};
  spec.shown_name = job.what;
  if (job.python) spec.interpreter = job.python->path + " (" + job.python->reason + ")";
  spec.error_file = id.error_file;
  return spec;
}

// This node's failure as the other nodes read it.
FailureRecord own_record(Rendezvous& rendezvous, const Assignment& a, int attempt, const GroupResult& r) {
  FailureRecord mine;
  mine.host = rendezvous.host();
  mine.node_rank = a.node_rank;
  if (r.outcome == GroupOutcome::interrupted) {
    mine.final = rendezvous.leaving_is_final(attempt);
    mine.cause = "distrun stopped by " + signal_abbrev(r.signal) + (mine.final ? "" : " (the node left)");
  } else {
    mine.rank = r.failure->rank;
    mine.frozen = r.failure->wait_status == WorkerGroup::kStoppedStatus;
    mine.cause = "worker (local rank " + std::to_string(r.failure->local_rank) + ") ended with " +
                 describe_wait_status(r.failure->wait_status);
  }
  return mine;
}

// One attempt's watch of its workers and of the other nodes, and what it tells them.
class AttemptWatch {
 public:
  AttemptWatch(const AgentJob& job, Rendezvous& rendezvous, const Assignment& a, int attempt, int restart)
      : job_(job), rendezvous_(rendezvous), a_(a), attempt_(attempt), restart_(restart) {}

  AttemptOutcome run(const std::vector<WorkerSpec>& specs, OutputRouter& router) {
    // A worker frozen for the heartbeat timeout is as gone as a silent agent.
    WorkerGroup group(specs, router, job_.signals, std::chrono::milliseconds(int64_t(job_.options.stop_grace * 1000)),
                      std::chrono::milliseconds(int64_t(job_.options.heartbeat_timeout * 1000)));
    group_ = &group;
    out_.result = group.run([this] { return peer_failed(); }, job_.watch_interval,
                            [this](const GroupResult& r) { on_failure(r); });
    group_ = nullptr;
    return out_;
  }

  // Once the failure is known, this node's flight records go to the others at once, for their
  // summaries.
  void publish_flights() {
    if (flights_published_) return;
    flights_published_ = true;
    rendezvous_.publish(attempt_, "flights", encode_flight_report(local_flights()));
  }

 private:
  bool peer_failed() {
    out_.first = rendezvous_.watch(attempt_);
    if (!out_.first) return false;
    // A worker of ours frozen now: the failed rank elsewhere most likely gave up waiting for
    // it, so it is told (and takes that rank's place as the first failure) before the flight
    // records go out, which the other nodes wait for before they print the failure.
    if (!out_.first->frozen && out_.first->rank >= 0)
      if (auto frozen = group_->stopped_now()) {
        GroupResult mine;
        mine.outcome = GroupOutcome::failed;
        mine.failure = std::move(frozen);
        on_failure(mine);
      }
    publish_flights();
    return true;
  }

  // Seen the moment it happens, while the other workers are still being stopped (which may
  // take up to --stop-grace: a checkpoint being saved): the other nodes are told, and the
  // summary comes first.
  void on_failure(const GroupResult& r) {
    out_.first = rendezvous_.report_failure(attempt_, own_record(rendezvous_, a_, attempt_, r));
    if (out_.first) publish_flights();
    if (r.outcome != GroupOutcome::failed) return;
    if (read_error_file(r.failure->error_file)) job_.logs.keep();  // the summary names it
    // Alone: the table of the collectives the others are stuck in, read right now. Shared:
    // the other nodes' tables follow once gathered, after the stop.
    out_.summary = format_failure(*r.failure, rendezvous_.host(), out_.first ? "" : local_flight_table());
    // A failure a restart recovers from is told, but not as an error (torchrun logs it as info).
    const bool restarts = !out_.first && restart_ < job_.options.max_restarts;
    std::cerr << (restarts ? "distrun: " : "distrun: error: ") << out_.summary << std::flush;
  }

  const AgentJob& job_;
  Rendezvous& rendezvous_;
  const Assignment& a_;
  int attempt_, restart_;
  AttemptOutcome out_;
  bool flights_published_ = false;
  WorkerGroup* group_ = nullptr;  // while run() runs
};

}  // namespace

void print_job_failure(const FailureRecord& first) {
  std::cerr << "distrun: error: job failed; first failure: " << first.summary() << std::endl;
}

AttemptOutcome run_attempt(const AgentJob& job, Rendezvous& rendezvous, const Assignment& a, int attempt, int restart) {
  OutputConfig console = job.output;
  console.prefix = a.world_size > 1 || job.output.tee.any();  // torchrun prefixes a lone rank only with --tee
  OutputRouter router(console, job.plan.nproc_per_node, a.rank_offset, job.redirected ? &job.logs : nullptr,
                      a.log_attempt);
  const std::optional<winsize> terminal = workers_terminal(job.redirected);
  const bool bind = binds_cpus(job, rendezvous);
  std::vector<WorkerSpec> specs;
  for (int local = 0; local < job.plan.nproc_per_node; ++local)
    specs.push_back(worker_spec(job, a, local, restart, terminal, bind));
  AttemptWatch watch(job, rendezvous, a, attempt, restart);
  AttemptOutcome out;
  try {
    out = watch.run(specs, router);
  } catch (...) {
    end_adopted_children();  // the group killed its shims outright: their orphans are ours now
    throw;
  }
  end_adopted_children();  // the group has reaped its workers: what is left was orphaned below
  out.log_error = router.log_error();
  if (out.result.outcome == GroupOutcome::succeeded) {
    out.first = rendezvous.finish(attempt);
    if (out.first) watch.publish_flights();
  }
  if (!out.first) return out;
  // Gathered before acknowledge(): node 0 keeps the store up until the others have read.
  const std::string flights =
      out.result.outcome == GroupOutcome::interrupted ? "" : job_flight_table(rendezvous, attempt, a.node_rank);
  rendezvous.acknowledge(attempt);
  // Read again, once settled: a frozen worker found by another node since may have taken the
  // first place.
  if (auto now = rendezvous.first_failure(attempt)) out.first = now;
  if (!out.first->joining) {
    print_job_failure(*out.first);
    if (!flights.empty()) std::cerr << "distrun: " << flights << std::flush;
  }
  return out;
}

}  // namespace distrun::launcher
