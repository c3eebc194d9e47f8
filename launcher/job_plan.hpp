// Where this agent stands in the job: nodes, this node's rank, workers per node, and where
// node 0 is, resolved from the options and (with --launcher slurm/mpi/auto) the environment.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "distrun/env/world.hpp"
#include "options.hpp"

namespace distrun::launcher {

struct JobPlan {
  int nnodes = 1;     // elastic: MAX, the most nodes a round admits
  int min_nodes = 1;  // elastic: MIN, the fewest a round starts with (== nnodes when static)
  int node_rank = 0;  // elastic: unknown until a round assigns it (kept 0 here)
  int nproc_per_node = 1;
  std::string master_addr = "127.0.0.1";
  // Multi-node: the port of the agents' rendezvous on node 0. One node: the workers' port
  // when the user named one (checked free), else nullopt (a free port is picked).
  std::optional<uint16_t> master_port;
  bool port_from_user = false;     // --master-port or --rdzv-endpoint named it (not derived)
  std::string source = "pytorch";  // where nnodes/node rank came from: pytorch | slurm | mpi
  std::string run_id = "none";

  /// --nnodes MIN:MAX with MIN < MAX: nodes meet in rounds (see rendezvous/elastic.hpp).
  bool elastic() const { return min_nodes < nnodes; }
  bool single_node() const { return nnodes == 1; }
};

/// Resolves `spec` of --nproc-per-node: a positive integer, "cpu" (cores), "gpu" (CUDA
/// devices; ConfigError when none), or "auto" (GPUs when any, else cores).
int resolve_nproc_per_node(const std::string& spec);

/// Which launcher convention applies for --launcher auto: "slurm" when srun started us inside a
/// job (SLURM_JOB_ID, SLURM_NODEID and SLURM_STEP_ID set), else "pytorch".
std::string detect_launcher(const EnvLookup& env);

/// Builds the plan from options and environment. `scenario_world_size` (from the scenario
/// file, if it declares one) sets the default workers per node. ConfigError when inconsistent.
JobPlan plan_job(const LaunchOptions& options, const EnvLookup& env, std::optional<int> scenario_world_size);

}  // namespace distrun::launcher
