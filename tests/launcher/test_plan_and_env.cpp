// Job plans from options and environments, torchrun's worker environment, redirect specs,
// local-rank filters and signal names.
#include <signal.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <regex>
#include <map>

#include "distrun/core/error.hpp"
#include "distrun/nccl/device_choice.hpp"
#include "job_plan.hpp"
#include "output_router.hpp"
#include "signal_names.hpp"
#include "std_spec.hpp"
#include "worker_env.hpp"

using namespace distrun::launcher;
using distrun::ConfigError;

namespace {
distrun::EnvLookup env_of(std::map<std::string, std::string> m) {
  return [m](const std::string& k) -> std::optional<std::string> {
    auto it = m.find(k);
    if (it == m.end()) return std::nullopt;
    return it->second;
  };
}
}  // namespace

TEST_CASE("plan: one node defaults and the scenario's world size", "[launcher][plan]") {
  LaunchOptions o;
  auto p = plan_job(o, env_of({}), std::nullopt);
  CHECK(p.nnodes == 1);
  CHECK(p.nproc_per_node == 1);
  CHECK(!p.master_port);  // a free port is picked later
  CHECK(plan_job(o, env_of({}), 4).nproc_per_node == 4);
  o.nnodes = "2";
  o.master_addr = "h0";
  auto two = plan_job(o, env_of({}), 4);
  CHECK(two.nproc_per_node == 2);
  CHECK(two.master_port == 29500);
  CHECK_THROWS_AS(plan_job(o, env_of({}), 3), ConfigError);
  o.nproc_per_node = "3";
  CHECK(plan_job(o, env_of({}), 4).nproc_per_node == 3);  // the option wins
}

TEST_CASE("plan: nnodes, node rank and endpoints", "[launcher][plan]") {
  LaunchOptions o;
  o.nnodes = "2:2";
  o.node_rank = 1;
  o.rdzv_endpoint = "10.1.2.3:7000";
  auto p = plan_job(o, env_of({}), std::nullopt);
  CHECK(p.nnodes == 2);
  CHECK(p.master_addr == "10.1.2.3");
  CHECK(p.master_port == 7000);
  o.rdzv_endpoint = "[::1]:7001";
  CHECK(plan_job(o, env_of({}), std::nullopt).master_addr == "::1");
  o.rdzv_endpoint = "";
  CHECK_FALSE(p.elastic());
  // Elastic: MIN:MAX with MIN < MAX; the node rank comes from the rounds, not the option.
  o.nnodes = "1:3";
  o.node_rank = 5;
  auto e = plan_job(o, env_of({}), std::nullopt);
  CHECK(e.elastic());
  CHECK(e.min_nodes == 1);
  CHECK(e.nnodes == 3);
  CHECK(e.node_rank == 0);
  CHECK(e.master_port == 29500);
  o.nnodes = "3:1";
  CHECK_THROWS_AS(plan_job(o, env_of({}), std::nullopt), ConfigError);
  o.nnodes = "1:2";
  o.launcher = "slurm";
  CHECK_THROWS_WITH(plan_job(o, env_of({}), std::nullopt), Catch::Contains("needs --launcher pytorch"));
  o.launcher = "auto";
  o.nnodes = "2";
  o.node_rank = 2;
  CHECK_THROWS_AS(plan_job(o, env_of({}), std::nullopt), ConfigError);
  o.node_rank = 0;
  o.standalone = true;
  CHECK_THROWS_AS(plan_job(o, env_of({}), std::nullopt), ConfigError);
  // --standalone: torchrun's localhost, a free port and a fresh uuid4 run id.
  o.nnodes = "1";
  auto s1 = plan_job(o, env_of({}), std::nullopt), s2 = plan_job(o, env_of({}), std::nullopt);
  CHECK(s1.master_addr == "localhost");
  CHECK_FALSE(s1.master_port.has_value());
  CHECK(std::regex_match(s1.run_id, std::regex("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")));
  CHECK(s1.run_id != s2.run_id);
  o.nnodes = "2";
  o.nproc_per_node = "0";
  o.standalone = false;
  CHECK_THROWS_AS(plan_job(o, env_of({}), std::nullopt), ConfigError);
}

TEST_CASE("plan: --run-id is one safe name, --master-addr may be a bracketed v6 address", "[launcher][plan]") {
  LaunchOptions o;
  for (const char* bad : {"../x", "a/b", "..", ".", "", "x\ny", "run id"}) {
    o.run_id = bad;
    CHECK_THROWS_AS(plan_job(o, env_of({}), std::nullopt), ConfigError);
  }
  o.run_id = "job-7.a_b";
  CHECK(plan_job(o, env_of({}), std::nullopt).run_id == "job-7.a_b");
  o.master_addr = "[::1]";
  CHECK(plan_job(o, env_of({}), std::nullopt).master_addr == "::1");
}

TEST_CASE("plan: nproc cpu and auto count something", "[launcher][plan]") {
  CHECK(resolve_nproc_per_node("cpu") >= 1);
  CHECK(resolve_nproc_per_node("auto") >= 1);
  CHECK(resolve_nproc_per_node("7") == 7);
  CHECK_THROWS_AS(resolve_nproc_per_node("many"), ConfigError);
  if (distrun::nccl::count_visible_cuda_devices() == 0) CHECK_THROWS_AS(resolve_nproc_per_node("gpu"), ConfigError);
}

TEST_CASE("plan: --launcher slurm and auto read SLURM's variables", "[launcher][plan]") {
  std::map<std::string, std::string> slurm = {{"SLURM_JOB_ID", "4242"},
                                              {"SLURM_STEP_ID", "0"},
                                              {"SLURM_PROCID", "1"},
                                              {"SLURM_NTASKS", "3"},
                                              {"SLURM_NODEID", "1"},
                                              {"SLURM_NNODES", "3"},
                                              {"SLURM_JOB_NODELIST", "node[07-09]"},
                                              {"SLURM_TASKS_PER_NODE", "1(x3)"}};
  CHECK(detect_launcher(env_of(slurm)) == "slurm");
  LaunchOptions o;  // launcher auto
  auto p = plan_job(o, env_of(slurm), std::nullopt);
  CHECK(p.source == "slurm");
  CHECK(p.nnodes == 3);
  CHECK(p.node_rank == 1);
  CHECK(p.master_addr == "node07");
  REQUIRE(p.master_port);
  CHECK(*p.master_port >= distrun::kJobPortFirst);  // derived from the job id
  CHECK(*p.master_port <= distrun::kJobPortLast);
  CHECK(!p.port_from_user);
  auto one = slurm;
  one["SLURM_NNODES"] = "1";
  one["SLURM_NODEID"] = "0";
  one["SLURM_PROCID"] = "0";
  one["SLURM_NTASKS"] = "1";
  one["SLURM_JOB_NODELIST"] = "node07";
  CHECK(!plan_job(o, env_of(one), std::nullopt).master_port);  // one node: a free port later
  auto no_step = slurm;
  no_step.erase("SLURM_STEP_ID");
  CHECK(detect_launcher(env_of(no_step)) == "pytorch");
  o.launcher = "slurm";
  CHECK_THROWS_AS(plan_job(o, env_of({}), std::nullopt), ConfigError);
}

TEST_CASE("plan: --launcher mpi takes one agent per MPI rank", "[launcher][plan]") {
  LaunchOptions o;
  o.launcher = "mpi";
  auto p = plan_job(o,
                    env_of({{"OMPI_COMM_WORLD_RANK", "1"},
                            {"OMPI_COMM_WORLD_SIZE", "2"},
                            {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"},
                            {"MASTER_ADDR", "hostA"}}),
                    std::nullopt);
  CHECK(p.nnodes == 2);
  CHECK(p.node_rank == 1);
  CHECK(p.master_addr == "hostA");
  // Several hosts and no MASTER_ADDR: a clear error.
  CHECK_THROWS_AS(plan_job(o,
                           env_of({{"OMPI_COMM_WORLD_RANK", "0"},
                                   {"OMPI_COMM_WORLD_SIZE", "2"},
                                   {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"}}),
                           std::nullopt),
                  ConfigError);
}

TEST_CASE("worker environment is torchrun's", "[launcher][env]") {
  WorkerIdentity id;
  id.rank = 5;
  id.local_rank = 1;
  id.world_size = 8;
  id.local_world_size = 4;
  id.group_rank = 1;
  id.group_world_size = 2;
  id.master_addr = "h0";
  id.master_port = 4321;
  id.restart_count = 2;
  id.max_restarts = 3;
  id.run_id = "r1";
  id.store_secret = "abc";
  auto env = worker_environment({{"PATH", "/bin"}, {"RANK", "stale"}}, id);
  std::map<std::string, std::string> want = {{"PATH", "/bin"},
                                             {"RANK", "5"},
                                             {"LOCAL_RANK", "1"},
                                             {"WORLD_SIZE", "8"},
                                             {"LOCAL_WORLD_SIZE", "4"},
                                             {"GROUP_RANK", "1"},
                                             {"GROUP_WORLD_SIZE", "2"},
                                             {"ROLE_RANK", "5"},
                                             {"ROLE_WORLD_SIZE", "8"},
                                             {"ROLE_NAME", "default"},
                                             {"MASTER_ADDR", "h0"},
                                             {"MASTER_PORT", "4321"},
                                             {"TORCHELASTIC_RESTART_COUNT", "2"},
                                             {"TORCHELASTIC_MAX_RESTARTS", "3"},
                                             {"TORCHELASTIC_RUN_ID", "r1"},
                                             {"OMP_NUM_THREADS", "1"},
                                             {"DISTRUN_STORE_SECRET", "abc"},
                                             {"PYTHONUNBUFFERED", "1"},
                                             {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"},
                                             {"NCCL_ASYNC_ERROR_HANDLING", "1"}};
  CHECK(env == want);
  // Per-worker error file and the master's interface; the user's own settings win.
  id.error_file = "/logs/r_1/attempt_0/1/error.json";
  id.socket_ifname = "eth7";
  auto more = worker_environment({{"TORCHELASTIC_ERROR_FILE", "/agent.json"},
                                  {"NCCL_SOCKET_IFNAME", "ib0"},
                                  {"PYTHONUNBUFFERED", "0"},
                                  {"NCCL_ASYNC_ERROR_HANDLING", "3"}},
                                 id);
  CHECK(more["TORCHELASTIC_ERROR_FILE"] == id.error_file);
  CHECK(more["GLOO_SOCKET_IFNAME"] == "eth7");
  CHECK(more["NCCL_SOCKET_IFNAME"] == "ib0");
  CHECK(more["PYTHONUNBUFFERED"] == "0");
  CHECK(more["NCCL_ASYNC_ERROR_HANDLING"] == "3");
  CHECK(socket_interface("127.0.0.1", "") == "lo");
  CHECK(worker_environment({{"OMP_NUM_THREADS", "8"}}, id)["OMP_NUM_THREADS"] == "8");
  id.local_world_size = 1;
  CHECK(worker_environment({}, id).count("OMP_NUM_THREADS") == 0);
  CHECK(to_envp({{"A", "1"}, {"B", "x=y"}}) == std::vector<std::string>{"A=1", "B=x=y"});
}

TEST_CASE("redirect and tee specs, as torchrun", "[launcher][redirects]") {
  auto all = StdSpec::parse("3", "--redirects");
  CHECK(all.for_rank(0) == Streams::both);
  CHECK(all.for_rank(99) == Streams::both);
  CHECK(all.covers(1, true));
  auto per = StdSpec::parse("0:1,1:2", "--tee");
  CHECK(per.for_rank(0) == Streams::out);
  CHECK(per.covers(0, false));
  CHECK(!per.covers(0, true));
  CHECK(per.for_rank(1) == Streams::err);
  CHECK(per.for_rank(2) == Streams::none);
  CHECK(per.any());
  CHECK(!StdSpec::parse("0", "--tee").any());
  for (const char* bad : {"4", "x", "0:", ":1", "0:1,", "1;2", ""})
    CHECK_THROWS_AS(StdSpec::parse(bad, "--tee"), ConfigError);
}

TEST_CASE("local ranks filter", "[launcher][redirects]") {
  CHECK(parse_local_ranks_filter("0,2") == std::set<int>{0, 2});
  CHECK(parse_local_ranks_filter("").empty());
  CHECK_THROWS_AS(parse_local_ranks_filter("0,,1"), ConfigError);
  CHECK_THROWS_AS(parse_local_ranks_filter("a"), ConfigError);
}

TEST_CASE("signal names and wait statuses", "[launcher][signals]") {
  CHECK(signal_abbrev(SIGKILL) == "SIGKILL");
  CHECK(signal_abbrev(SIGSEGV) == "SIGSEGV");
  CHECK(signal_abbrev(SIGTERM) == "SIGTERM");
  CHECK(signal_abbrev(200) == "SIG200");
  CHECK(describe_wait_status(3 << 8) == "exit code 3");  // as waitpid encodes exit(3)
  CHECK(describe_wait_status(SIGKILL).rfind("signal 9 (SIGKILL", 0) == 0);
}
