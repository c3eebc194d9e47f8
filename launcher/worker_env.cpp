#include "worker_env.hpp"

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
  return env;
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
