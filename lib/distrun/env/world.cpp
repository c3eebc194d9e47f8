#include "distrun/env/world.hpp"

#include <cstdlib>

#include "distrun/core/error.hpp"
#include "distrun/env/hostlist.hpp"

namespace distrun {

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  };
}

int parse_env_int(const std::string& name, const std::string& value) {
  try {
    size_t used = 0;
    long v = std::stol(value, &used);
    if (used == value.size() && v >= INT32_MIN && v <= INT32_MAX) return int(v);
  } catch (const std::exception&) {
  }
  throw ConfigError("environment: " + name + "='" + value + "' is not an integer");
}

uint16_t port_from_job_id(const std::string& job_id) {
  // FNV-1a, folded into kJobPortFirst..kJobPortLast so that jobs on one host differ by id.
  // The range ends below Linux's ephemeral ports (32768 up): a port in them can be held at
  // any moment by some process's outgoing connection, and every rank derives the same port,
  // so none can pick another.
  uint32_t h = 2166136261u;
  for (char c : job_id) h = (h ^ uint8_t(c)) * 16777619u;
  return uint16_t(kJobPortFirst + h % (kJobPortLast - kJobPortFirst + 1));
}

int slurm_tasks_on_node(const std::string& spec, int node) {
  int seen = 0;
  size_t at = 0;
  while (at < spec.size()) {
    size_t comma = spec.find(',', at);
    std::string item = spec.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    int count = 0, repeat = 1;
    size_t paren = item.find("(x");
    count = parse_env_int("SLURM_TASKS_PER_NODE", item.substr(0, paren));
    if (paren != std::string::npos) {
      if (item.back() != ')') throw ConfigError("environment: malformed SLURM_TASKS_PER_NODE='" + spec + "'");
      repeat = parse_env_int("SLURM_TASKS_PER_NODE", item.substr(paren + 2, item.size() - paren - 3));
    }
    if (node < seen + repeat) return count;
    seen += repeat;
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  throw ConfigError("environment: SLURM_TASKS_PER_NODE='" + spec + "' has no entry for node " + std::to_string(node));
}

namespace {

struct Reader {
  const EnvLookup& env;
  std::optional<std::string> str(const std::string& n) const {
    auto v = env(n);
    if (v && v->empty()) return std::nullopt;
    return v;
  }
  std::optional<int> num(const std::string& n) const {
    auto v = str(n);
    if (!v) return std::nullopt;
    return parse_env_int(n, *v);
  }
  // The first of several names that is set.
  std::optional<int> first(std::initializer_list<const char*> names) const {
    for (const char* n : names)
      if (auto v = num(n)) return v;
    return std::nullopt;
  }
};

void read_pytorch(const Reader& r, WorldInfo& w) {
  w.source = "pytorch";
  w.rank = *r.num("RANK");
  w.world_size = *r.num("WORLD_SIZE");
  w.local_rank = r.num("LOCAL_RANK").value_or(w.rank);
  w.local_world_size = r.num("LOCAL_WORLD_SIZE").value_or(w.world_size);
  w.node_rank = r.num("GROUP_RANK").value_or(0);
  w.nnodes = r.num("GROUP_WORLD_SIZE").value_or(1);
}

void read_slurm(const Reader& r, WorldInfo& w) {
  w.source = "slurm";
  w.rank = *r.num("SLURM_PROCID");
  w.world_size = *r.num("SLURM_NTASKS");
  w.local_rank = r.num("SLURM_LOCALID").value_or(0);
  w.node_rank = r.num("SLURM_NODEID").value_or(0);
  w.nnodes = r.first({"SLURM_STEP_NUM_NODES", "SLURM_JOB_NUM_NODES", "SLURM_NNODES"}).value_or(1);
  if (auto tpn = r.str("SLURM_STEP_TASKS_PER_NODE"); tpn)
    w.local_world_size = slurm_tasks_on_node(*tpn, w.node_rank);
  else if (auto tpn2 = r.str("SLURM_TASKS_PER_NODE"); tpn2)
    w.local_world_size = slurm_tasks_on_node(*tpn2, w.node_rank);
  else
    w.local_world_size = w.world_size / std::max(1, w.nnodes);
}

bool read_mpi(const Reader& r, WorldInfo& w) {
  auto rank = r.first({"OMPI_COMM_WORLD_RANK", "PMI_RANK", "MV2_COMM_WORLD_RANK", "PMIX_RANK"});
  auto size = r.first({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE"});
  if (!rank || !size) return false;
  w.source = "mpi";
  w.rank = *rank;
  w.world_size = *size;
  w.local_rank = r.first({"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "MV2_COMM_WORLD_LOCAL_RANK"}).value_or(0);
  w.local_world_size =
      r.first({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "MV2_COMM_WORLD_LOCAL_SIZE"}).value_or(w.world_size);
  w.node_rank = r.first({"OMPI_COMM_WORLD_NODE_RANK"}).value_or(0);
  w.nnodes = (w.world_size + w.local_world_size - 1) / std::max(1, w.local_world_size);
  return true;
}

}  // namespace

WorldInfo world_from_env(const EnvLookup& env) {
  Reader r{env};
  WorldInfo w;
  if (r.str("RANK") && r.str("WORLD_SIZE"))
    read_pytorch(r, w);
  else if (r.str("SLURM_PROCID") && r.str("SLURM_NTASKS"))
    read_slurm(r, w);
  else if (!read_mpi(r, w))
    return w;  // a world of one

  if (w.world_size < 1) throw ConfigError("environment: world size " + std::to_string(w.world_size) + " < 1");
  if (w.rank < 0 || w.rank >= w.world_size)
    throw ConfigError("environment: rank " + std::to_string(w.rank) + " outside world of " +
                      std::to_string(w.world_size));

  if (auto addr = r.str("MASTER_ADDR")) {
    w.master_addr = *addr;
  } else if (w.source == "slurm" || (w.source != "pytorch" && r.str("SLURM_JOB_NODELIST"))) {
    auto list = r.str("SLURM_STEP_NODELIST") ? r.str("SLURM_STEP_NODELIST") : r.str("SLURM_JOB_NODELIST");
    if (!list) throw ConfigError("environment: SLURM job without SLURM_JOB_NODELIST; set MASTER_ADDR");
    w.master_addr = expand_hostlist(*list).front();
  } else if (w.source == "mpi") {
    if (w.local_world_size != w.world_size)
      throw ConfigError(
          "environment: MPI ranks span several hosts; set MASTER_ADDR to rank 0's host "
          "(e.g. mpirun -x MASTER_ADDR=host0)");
    w.master_addr = "127.0.0.1";
  }

  if (auto port = r.str("MASTER_PORT")) {
    int p = parse_env_int("MASTER_PORT", *port);
    if (p < 1 || p > 65535) throw ConfigError("environment: MASTER_PORT=" + *port + " is not a port");
    w.master_port = uint16_t(p);
  } else if (auto id = r.str("SLURM_JOB_ID")) {
    w.master_port = port_from_job_id(*id + r.str("SLURM_STEP_ID").value_or(""));
  } else if (auto ns = r.str("PMIX_NAMESPACE")) {
    w.master_port = port_from_job_id(*ns);
  } else if (auto jid = r.str("OMPI_MCA_ess_base_jobid")) {
    w.master_port = port_from_job_id(*jid);
  }
  return w;
}

}  // namespace distrun
