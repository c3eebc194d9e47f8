// The environment each worker gets: the launcher's own, plus exactly torchrun's variables.
#pragma once
#include <map>
#include <string>
#include <vector>

namespace distrun::launcher {

/// Everything that differs between workers and attempts.
struct WorkerIdentity {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  int group_rank = 0;        // node rank
  int group_world_size = 1;  // nnodes
  std::string role_name = "default";
  std::string master_addr = "127.0.0.1";
  uint16_t master_port = 29500;
  int restart_count = 0;
  int max_restarts = 0;
  std::string run_id = "none";
  std::string store_secret;     // DISTRUN_STORE_SECRET; empty: not set
  std::string flight_recorder;  // DISTRUN_FLIGHT_RECORDER (the agent's flight file); empty: not set
  std::string error_file;       // TORCHELASTIC_ERROR_FILE: where torch's @record writes error.json
  std::string socket_ifname;    // the interface that routes to the master; empty: unknown
};

using EnvMap = std::map<std::string, std::string>;

/// Adds torchrun's variables for `id` to `base` (the launcher's environment) and returns it.
/// OMP_NUM_THREADS=1 is set when unset in `base` and more than one worker runs on the node;
/// PYTHONUNBUFFERED=1, TORCH_NCCL_ASYNC_ERROR_HANDLING=1, NCCL_ASYNC_ERROR_HANDLING=1 and the
/// GLOO/NCCL_SOCKET_IFNAME interface likewise only when `base` does not set them.
EnvMap worker_environment(EnvMap base, const WorkerIdentity& id);

/// The interface for GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME: the one holding `local_addr` when
/// given, else the one the kernel routes to `master_addr` through; empty when unknown.
std::string socket_interface(const std::string& master_addr, const std::string& local_addr);

/// The current process environment as a map.
EnvMap current_environment();

/// "KEY=VALUE" strings, for execve.
std::vector<std::string> to_envp(const EnvMap& env);

}  // namespace distrun::launcher
