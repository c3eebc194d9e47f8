// Who this process is in the job, read from the environment conventions of PyTorch
// (torchrun), SLURM (srun) and MPI launchers (Open MPI, MPICH/PMI, MVAPICH, PMIx).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace distrun {

struct WorldInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;
  int nnodes = 1;
  std::string master_addr = "127.0.0.1";
  uint16_t master_port = 29500;
  std::string source = "none";  // pytorch | slurm | mpi | none (a world of one)
};

/// Looks a variable up; the default reads the process environment. Tests pass a map.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
/// The process environment as an EnvLookup.
EnvLookup process_env();

/// Reads the world from PyTorch's variables, else SLURM's, else MPI's; a world of one when
/// none is set. ConfigError for malformed values or a multi-host MPI job without MASTER_ADDR.
WorldInfo world_from_env(const EnvLookup& env = process_env());

/// MASTER_PORT derived from a job id, so that two jobs on one host do not collide; always in
/// kJobPortFirst..kJobPortLast, below the kernel's ephemeral ports.
uint16_t port_from_job_id(const std::string& job_id);
inline constexpr uint16_t kJobPortFirst = 20000;
inline constexpr uint16_t kJobPortLast = 32767;

/// Expands SLURM_TASKS_PER_NODE ("2(x3),1") and returns the count for node `node`.
int slurm_tasks_on_node(const std::string& tasks_per_node, int node);

/// Parses a whole decimal int from `value` of variable `name`; ConfigError otherwise.
int parse_env_int(const std::string& name, const std::string& value);

}  // namespace distrun
