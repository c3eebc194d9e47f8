#include "worker_env.hpp"

#include "distrun/core/error.hpp"
#include "distrun/env/netif.hpp"

extern char** environ;

namespace distrun::launcher {

EnvMap worker_environment(EnvMap env, const WorkerIdentity& id) {
  auto num = [](int v) { return std::to_string(v); };
  env["RANK"] = num(id.rank);
  env["LOCAL_RANK"] = num(id.local_rank);
  env["WORLD_SIZE"] = num(id.world_size);
  env["LOCAL_WORLD_SIZE"] = num(id.local_world_size);
  env["GROUP_RANK"] = num(id.group_rank);
  env["GROUP_WORLD_SIZE"] = num(id.group_world_size);
  // One role per job, as torchrun: role ranks are the global ranks.
  env["ROLE_RANK"] = num(id.rank);
  env["ROLE_WORLD_SIZE"] = num(id.world_size);
  env["ROLE_NAME"] = id.role_name;
  env["MASTER_ADDR"] = id.master_addr;
  env["MASTER_PORT"] = num(id.master_port);
  env["TORCHELASTIC_RESTART_COUNT"] = num(id.restart_count);
  env["TORCHELASTIC_MAX_RESTARTS"] = num(id.max_restarts);
  env["TORCHELASTIC_RUN_ID"] = id.run_id;
  if (id.local_world_size > 1 && env.find("OMP_NUM_THREADS") == env.end()) env["OMP_NUM_THREADS"] = "1";
  if (!id.store_secret.empty()) env["DISTRUN_STORE_SECRET"] = id.store_secret;
  if (!id.flight_recorder.empty()) env["DISTRUN_FLIGHT_RECORDER"] = id.flight_recorder;
  // The launcher's own TORCHELASTIC_ERROR_FILE is its agent-level file; each worker gets its own.
  if (!id.error_file.empty())
    env["TORCHELASTIC_ERROR_FILE"] = id.error_file;
  else
    env.erase("TORCHELASTIC_ERROR_FILE");
  // What torch's agent sets unless the user did (1.13 reads NCCL_..., 2.x TORCH_NCCL_...);
  // PYTHONUNBUFFERED also reaches Python started by a wrapper script, not only `python -u`.
  env.emplace("PYTHONUNBUFFERED", "1");
  env.emplace("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
  env.emplace("NCCL_ASYNC_ERROR_HANDLING", "1");
  if (!id.socket_ifname.empty()) {
    env.emplace("GLOO_SOCKET_IFNAME", id.socket_ifname);
    env.emplace("NCCL_SOCKET_IFNAME", id.socket_ifname);
  }
  return env;
}

std::string socket_interface(const std::string& master_addr, const std::string& local_addr) {
  try {
    std::string addr = local_addr.empty() ? local_address_towards(master_addr) : resolve_host(local_addr);
    return interface_with_address(addr);
  } catch (const ConfigError&) {
    return "";  // no route yet (the master may come up later): leave the choice to the worker
  }
}

EnvMap current_environment() {
  EnvMap env;
  for (char** e = environ; e && *e; ++e) {
    std::string kv = *e;
    size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

std::vector<std::string> to_envp(const EnvMap& env) {
  std::vector<std::string> out;
  out.reserve(env.size());
  for (auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

}  // namespace distrun::launcher
