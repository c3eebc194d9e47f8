#include "job_plan.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <tuple>
#include <utility>

#include "distrun/core/error.hpp"
#include "distrun/nccl/device_choice.hpp"
#include "ports.hpp"
#include "rendezvous/rendezvous.hpp"

namespace distrun::launcher {
namespace {

int parse_positive(const std::string& text, const std::string& option) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || text.size() > 6 ||
      std::stoi(text) < 1)
    throw ConfigError(option + " " + text + ": expected a positive integer");
  return std::stoi(text);
}

// torchrun takes --nnodes N or MIN:MAX; {MIN, MAX}.
std::pair<int, int> parse_nnodes(const std::string& text) {
  size_t colon = text.find(':');
  if (colon == std::string::npos) {
    int n = parse_positive(text, "--nnodes");
    return {n, n};
  }
  int lo = parse_positive(text.substr(0, colon), "--nnodes");
  int hi = parse_positive(text.substr(colon + 1), "--nnodes");
  if (lo > hi) throw ConfigError("--nnodes " + text + ": MIN is larger than MAX");
  return {lo, hi};
}

// An env lookup that hides some variables, so world_from_env reads one convention only.
EnvLookup hiding(const EnvLookup& env, std::set<std::string> hidden) {
  return [env, hidden](const std::string& name) -> std::optional<std::string> {
    if (hidden.count(name)) return std::nullopt;
    return env(name);
  };
}

}  // namespace

int resolve_nproc_per_node(const std::string& spec) {
  if (spec == "cpu") return int(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  if (spec == "gpu" || spec == "auto") {
    // The devices the workers will see (CUDA_VISIBLE_DEVICES and cgroups honoured), counted as
    // the workers' device choice counts them.
    std::string why;
    int gpus = nccl::count_visible_cuda_devices(&why);
    if (gpus > 0) return gpus;
    if (spec == "gpu") throw ConfigError("--nproc-per-node gpu: no CUDA device is visible (" + why + ")");
    return int(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  }
  return parse_positive(spec, "--nproc-per-node");
}

std::string detect_launcher(const EnvLookup& env) {
  auto set = [&](const char* n) {
    auto v = env(n);
    return v && !v->empty();
  };
  return set("SLURM_JOB_ID") && set("SLURM_NODEID") && set("SLURM_STEP_ID") ? "slurm" : "pytorch";
}

namespace {

// The run id names a folder under --log-dir and the rendezvous keys: one plain name, so it
// can neither climb out of the folder ("../x") nor hide a path or a control character.
void check_run_id(const std::string& id) {
  const bool safe =
      !id.empty() && id.size() <= 128 && id != "." && id != ".." &&
      id.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") == std::string::npos;
  if (!safe)
    throw ConfigError("--run-id '" + id + "': use 1 to 128 letters, digits, '.', '_' or '-' (it names a folder)");
}

// --launcher slurm or mpi: one agent per node, started by srun or mpirun; the job's own
// variables say who we are.
void plan_from_job_variables(JobPlan& plan, const LaunchOptions& o, const EnvLookup& env) {
  std::set<std::string> hidden = {"RANK", "WORLD_SIZE"};
  if (plan.source == "mpi") hidden.insert({"SLURM_PROCID", "SLURM_NTASKS", "SLURM_JOB_NODELIST"});
  WorldInfo w = world_from_env(hiding(env, hidden));
  if (w.source != plan.source)
    throw ConfigError("--launcher " + plan.source + ": no " + plan.source + " job in the environment" +
                      (plan.source == "slurm" ? " (SLURM_PROCID/SLURM_NTASKS unset; start distrun with srun)"
                                              : " (OMPI_COMM_WORLD_RANK/PMI_RANK unset; start distrun with mpirun)"));
  if (plan.source == "slurm") {
    plan.nnodes = plan.min_nodes = w.nnodes;
    plan.node_rank = w.node_rank;
  } else {
    plan.nnodes = plan.min_nodes = w.world_size;  // one agent per node
    plan.node_rank = w.rank;
  }
  if (o.master_addr.empty() && o.rdzv_endpoint.empty()) plan.master_addr = w.master_addr;
  if (!o.master_port && o.rdzv_endpoint.empty()) plan.master_port = w.master_port;
}

// --rdzv-endpoint: "host", "host:port", "[v6addr]:port" or a bare v6 address.
void plan_from_endpoint(JobPlan& plan, const LaunchOptions& o) {
  const std::string& ep = o.rdzv_endpoint;
  std::string host = ep, port;
  if (ep.front() == '[') {
    size_t close = ep.find(']');
    if (close == std::string::npos) throw ConfigError("--rdzv-endpoint " + ep + ": unclosed '['");
    host = ep.substr(1, close - 1);
    if (close + 1 < ep.size() && ep[close + 1] == ':') port = ep.substr(close + 2);
  } else if (std::count(ep.begin(), ep.end(), ':') == 1) {
    host = ep.substr(0, ep.find(':'));
    port = ep.substr(ep.find(':') + 1);
  }
  if (host.empty()) throw ConfigError("--rdzv-endpoint " + ep + ": no host");
  plan.master_addr = host;
  if (port == "0") {
    // torchrun's "pick a free port" (its --standalone uses localhost:0): one node only, as
    // other nodes could not know the port.
    if (plan.nnodes != 1) throw ConfigError("--rdzv-endpoint " + ep + ": port 0 works on one node only");
    plan.master_port.reset();
    plan.port_from_user = false;
  } else if (!port.empty()) {
    int p = parse_positive(port, "--rdzv-endpoint port");
    if (p > 65535) throw ConfigError("--rdzv-endpoint " + ep + ": port out of range");
    plan.master_port = uint16_t(p);
    plan.port_from_user = true;
  }
}

}  // namespace

JobPlan plan_job(const LaunchOptions& o, const EnvLookup& env, std::optional<int> scenario_world_size) {
  JobPlan plan;
  check_run_id(o.run_id);
  plan.run_id = o.run_id;
  plan.source = o.launcher == "auto" ? detect_launcher(env) : o.launcher;
  std::tie(plan.min_nodes, plan.nnodes) = parse_nnodes(o.nnodes);
  plan.node_rank = o.node_rank;
  // Before the job's own variables replace --nnodes: what the kind of job it names allows.
  fit_plan_to_kind(plan, o);
  // "[v6addr]" as in a URL: the address inside.
  if (!o.master_addr.empty())
    plan.master_addr = o.master_addr.size() > 2 && o.master_addr.front() == '[' && o.master_addr.back() == ']'
                           ? o.master_addr.substr(1, o.master_addr.size() - 2)
                           : o.master_addr;
  if (o.master_port) plan.master_port = uint16_t(*o.master_port);
  plan.port_from_user = o.master_port.has_value();

  if (plan.source == "slurm" || plan.source == "mpi") plan_from_job_variables(plan, o, env);
  // A list of members names a cluster that keeps the rendezvous (etcd's), not node 0: the
  // rendezvous of that kind reads it (rendezvous/factory.cpp).
  if (!o.rdzv_endpoint.empty() && o.rdzv_endpoint.find(',') == std::string::npos) plan_from_endpoint(plan, o);

  if (o.standalone) {
    if (plan.nnodes != 1) throw ConfigError("--standalone runs one node; got --nnodes " + o.nnodes);
    // As torchrun's: localhost, a free port, and a fresh uuid4 as the run id (whatever --rdzv-id says).
    plan.master_addr = "localhost";
    plan.master_port.reset();
    const std::string h = random_hex(16);
    const std::string variant(1, "89ab"[std::stoi(h.substr(16, 1), nullptr, 16) & 3]);
    plan.run_id = h.substr(0, 8) + "-" + h.substr(8, 4) + "-4" + h.substr(13, 3) + "-" + variant + h.substr(17, 3) +
                  "-" + h.substr(20);
    plan.port_from_user = false;
  }
  if (plan.node_rank < 0 || plan.node_rank >= plan.nnodes)
    throw ConfigError("--node-rank " + std::to_string(plan.node_rank) + " outside 0.." +
                      std::to_string(plan.nnodes - 1));
  if (plan.nnodes > 1 && !plan.master_port) plan.master_port = 29500;  // torchrun's default
  // One node: only a port the user named is the workers' port; a derived one (SLURM job id)
  // is just as likely to be taken as any other, so a free port is picked instead.
  if (plan.nnodes == 1 && !plan.port_from_user) plan.master_port.reset();
  if (plan.nnodes > 1 && plan.master_addr.empty()) plan.master_addr = "127.0.0.1";

  if (!o.nproc_per_node.empty()) {
    plan.nproc_per_node = resolve_nproc_per_node(o.nproc_per_node);
  } else if (scenario_world_size) {
    if (*scenario_world_size % plan.nnodes != 0)
      throw ConfigError("scenario world_size " + std::to_string(*scenario_world_size) + " does not divide over " +
                        std::to_string(plan.nnodes) + " nodes; give --nproc-per-node");
    plan.nproc_per_node = *scenario_world_size / plan.nnodes;
  } else {
    plan.nproc_per_node = 1;  // torchrun's default
  }
  return plan;
}

}  // namespace distrun::launcher
