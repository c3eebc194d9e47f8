// Reading the world from PyTorch, SLURM and MPI environments.
#include <catch2/catch.hpp>
#include <algorithm>
#include <map>

#include "distrun/core/error.hpp"
#include "distrun/env/world.hpp"

using namespace distrun;

namespace {
EnvLookup env(std::map<std::string, std::string> m) {
  return [m](const std::string& k) -> std::optional<std::string> {
    auto it = m.find(k);
    if (it == m.end()) return std::nullopt;
    return it->second;
  };
}
}  // namespace

TEST_CASE("no variables: a world of one") {
  WorldInfo w = world_from_env(env({}));
  CHECK(w.rank == 0);
  CHECK(w.world_size == 1);
  CHECK(w.source == "none");
}

TEST_CASE("PyTorch variables win over SLURM's") {
  WorldInfo w = world_from_env(env({{"RANK", "3"},
                                    {"WORLD_SIZE", "8"},
                                    {"LOCAL_RANK", "1"},
                                    {"LOCAL_WORLD_SIZE", "2"},
                                    {"GROUP_RANK", "1"},
                                    {"MASTER_ADDR", "h0"},
                                    {"MASTER_PORT", "1234"},
                                    {"SLURM_PROCID", "5"},
                                    {"SLURM_NTASKS", "9"}}));
  CHECK(w.source == "pytorch");
  CHECK(w.rank == 3);
  CHECK(w.world_size == 8);
  CHECK(w.local_rank == 1);
  CHECK(w.local_world_size == 2);
  CHECK(w.node_rank == 1);
  CHECK(w.master_addr == "h0");
  CHECK(w.master_port == 1234);
}

TEST_CASE("SLURM: rank, local size from tasks per node, master from the nodelist, port from the job") {
  auto vars = std::map<std::string, std::string>{{"SLURM_PROCID", "5"},
                                                 {"SLURM_NTASKS", "7"},
                                                 {"SLURM_LOCALID", "1"},
                                                 {"SLURM_NODEID", "2"},
                                                 {"SLURM_JOB_NUM_NODES", "3"},
                                                 {"SLURM_TASKS_PER_NODE", "2(x2),3"},
                                                 {"SLURM_JOB_NODELIST", "gpu[07-09]"},
                                                 {"SLURM_JOB_ID", "4242"}};
  WorldInfo w = world_from_env(env(vars));
  CHECK(w.source == "slurm");
  CHECK(w.rank == 5);
  CHECK(w.world_size == 7);
  CHECK(w.local_rank == 1);
  CHECK(w.local_world_size == 3);
  CHECK(w.node_rank == 2);
  CHECK(w.nnodes == 3);
  CHECK(w.master_addr == "gpu07");
  CHECK(w.master_port == port_from_job_id("4242"));
  vars["SLURM_JOB_ID"] = "4243";
  CHECK(world_from_env(env(vars)).master_port != w.master_port);
}

TEST_CASE("a port from a job id stays below the ephemeral ports and spreads over its range") {
  // Below 32768 no outgoing connection can hold it (Linux's default ephemeral range starts
  // there); a derived port in that range once met 'address in use' in the suite.
  uint16_t low = 65535, high = 0;
  for (int id = 0; id < 100000; ++id) {
    uint16_t p = port_from_job_id(std::to_string(id) + "0");
    low = std::min(low, p);
    high = std::max(high, p);
  }
  CHECK(low == kJobPortFirst);
  CHECK(high == kJobPortLast);
  CHECK(kJobPortLast < 32768);
}

TEST_CASE("MPI: Open MPI, PMI and MVAPICH variables") {
  WorldInfo o = world_from_env(env({{"OMPI_COMM_WORLD_RANK", "2"},
                                    {"OMPI_COMM_WORLD_SIZE", "4"},
                                    {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                                    {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                                    {"OMPI_MCA_ess_base_jobid", "77"}}));
  CHECK(o.source == "mpi");
  CHECK(o.rank == 2);
  CHECK(o.master_addr == "127.0.0.1");
  CHECK(o.master_port == port_from_job_id("77"));
  WorldInfo p = world_from_env(env({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}}));
  CHECK(p.rank == 1);
  CHECK(p.world_size == 2);
  WorldInfo m = world_from_env(env({{"MV2_COMM_WORLD_RANK", "0"}, {"MV2_COMM_WORLD_SIZE", "3"}}));
  CHECK(m.world_size == 3);
}

TEST_CASE("MPI across hosts without MASTER_ADDR asks for it") {
  auto e = env({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  CHECK_THROWS_WITH(world_from_env(e), Catch::Contains("MASTER_ADDR"));
}

TEST_CASE("malformed values are ConfigErrors") {
  CHECK_THROWS_AS(world_from_env(env({{"RANK", "x"}, {"WORLD_SIZE", "2"}})), ConfigError);
  CHECK_THROWS_AS(world_from_env(env({{"RANK", "2"}, {"WORLD_SIZE", "2"}})), ConfigError);
  CHECK_THROWS_AS(world_from_env(env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}})), ConfigError);
  CHECK(slurm_tasks_on_node("4", 0) == 4);
  CHECK_THROWS_AS(slurm_tasks_on_node("2(x2", 0), ConfigError);
  CHECK_THROWS_AS(slurm_tasks_on_node("2(x2)", 5), ConfigError);
}
