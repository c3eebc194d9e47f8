// torchrun 2.x compatibility pieces: PET_* defaults, --rdzv-conf, how programs are started,
// --signals-to-handle, NUMA cpulists, torch's error.json, and streamed output prefixes.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>

#include "distrun/core/error.hpp"
#include "failure_report.hpp"
#include "numa_binding.hpp"
#include "options.hpp"
#include "signal_names.hpp"

using namespace distrun::launcher;
using distrun::ConfigError;

namespace {
ParseResult parse(std::vector<std::string> args) {
  args.insert(args.begin(), "distrun");
  std::vector<const char*> argv;
  for (auto& a : args) argv.push_back(a.c_str());
  return parse_launch_options(int(argv.size()), argv.data());
}

struct ScopedEnv {
  std::string name;
  ScopedEnv(std::string n, const std::string& value) : name(std::move(n)) { setenv(name.c_str(), value.c_str(), 1); }
  ~ScopedEnv() { unsetenv(name.c_str()); }
};
}  // namespace

TEST_CASE("PET_* variables give torchrun's defaults; the command line wins", "[launcher][torchrun]") {
  ScopedEnv a("PET_NPROC_PER_NODE", "3"), b("PET_RDZV_ID", "petjob"), c("PET_NO_PYTHON", "1"),
      d("PET_MONITOR_INTERVAL", "0.5");
  auto o = parse({"prog"}).options;
  CHECK(o.nproc_per_node == "3");
  CHECK(o.run_id == "petjob");
  CHECK(o.no_python);
  CHECK(o.monitor_interval == Approx(0.5));
  CHECK(parse({"--nproc-per-node", "5", "prog"}).options.nproc_per_node == "5");
}

TEST_CASE("rendezvous conf keys (--rdzv-conf)", "[launcher][torchrun]") {
  auto o = parse({"--rdzv-conf", "join_timeout=12,read_timeout=60,last_call_timeout=3,stop_grace=2.5,is_host=1", "p"})
               .options;
  CHECK(o.rdzv_timeout == Approx(12));
  CHECK(o.stop_grace == Approx(2.5));
  CHECK(o.last_call_timeout == Approx(3));                      // elastic rounds' last call
  CHECK(parse({"p"}).options.last_call_timeout == Approx(30));  // torchrun's default
  CHECK_THROWS_AS(parse({"--rdzv-conf", "last_call_timeout=0", "p"}), ConfigError);
  CHECK(parse({"--rdzv-timeout", "7", "--rdzv-conf", "timeout=12", "p"}).options.rdzv_timeout == Approx(7));
  CHECK_THROWS_AS(parse({"--rdzv-conf", "join_timeout=-1", "p"}), ConfigError);
  CHECK_THROWS_AS(parse({"--rdzv-conf", "nokey", "p"}), ConfigError);
  CHECK_THROWS_AS(parse({"--rdzv-conf", "colour=red", "p"}), ConfigError);
  CHECK(parse({"--rdzv-backend", "etcd-v2", "p"}).options.rdzv_backend == "etcd-v2");  // torchrun's spelling
  // etcd's TLS as torchrun's etcd backends read it: both backends' spellings of the files.
  auto tls = parse({"--rdzv-backend", "etcd", "--rdzv-conf",
                    "protocol=HTTPS,cacert=/dev/null,ssl_cert=/dev/null,key=/dev/null", "p"})
                 .options;
  CHECK(tls.etcd_protocol == "https");
  CHECK(tls.etcd_cacert == "/dev/null");
  CHECK(tls.etcd_cert == "/dev/null");
  CHECK(tls.etcd_key == "/dev/null");
  CHECK_THROWS_AS(parse({"--rdzv-backend", "etcd", "--rdzv-conf", "protocol=ftp", "p"}), ConfigError);
  CHECK_THROWS_WITH(parse({"--rdzv-backend", "etcd", "--rdzv-conf", "ca_cert=/nonexistent/ca.pem", "p"}),
                    Catch::Contains("cannot read"));
  CHECK_THROWS_WITH(parse({"--rdzv-conf", "protocol=https", "p"}), Catch::Contains("--rdzv-backend etcd"));
  CHECK_THROWS_AS(parse({"--rdzv-backend", "zookeeper", "p"}), ConfigError);
  CHECK(parse({"--rdzv_backend=c10d", "--start_method", "fork", "p"}).options.rdzv_backend == "c10d");
}

TEST_CASE("programs start as torchrun starts them", "[launcher][torchrun]") {
  ScopedEnv py("PYTHON", "/opt/py/bin/python3");
  unsetenv("PYTHON_EXEC");
  auto argv = [](std::vector<std::string> args) {
    return program_argv(parse(std::move(args)).options, python_interpreter());
  };
  using V = std::vector<std::string>;
  CHECK(argv({"train.py", "--lr", "1"}) == V{"/opt/py/bin/python3", "-u", "train.py", "--lr", "1"});
  CHECK(argv({"-m", "pkg.train", "x"}) == V{"/opt/py/bin/python3", "-u", "-m", "pkg.train", "x"});
  CHECK(argv({"--run-path", "/abs/t.py"}) == V{"/opt/py/bin/python3", "-u", "/abs/t.py"});
  CHECK(argv({"--run-path", "--no-python", "/abs/t.py"}) == V{"/opt/py/bin/python3", "-u", "/abs/t.py"});
  CHECK(argv({"--no-python", "train.py"}) == V{"train.py"});
  CHECK(argv({"./a.out", "x"}) == V{"./a.out", "x"});
  CHECK(argv({"--", "sh", "-c", "true"}) == V{"sh", "-c", "true"});
  CHECK(parse({"-m", "configs.yaml"}).options.mode == RunMode::program);
  CHECK_THROWS_AS(parse({"--no-python", "-m", "x"}), ConfigError);
  ScopedEnv exec("PYTHON_EXEC", "/usr/bin/python3");  // torchrun's own variable comes first
  CHECK(argv({"t.py"}).front() == "/usr/bin/python3");
  CHECK(python_interpreter().reason == "$PYTHON_EXEC");
  CHECK(program_name({"/usr/bin/python3", "-u", "train.py", "--x"}) == "train.py");
  CHECK(program_name({"python3", "-u", "-m", "pkg.mod"}) == "-m pkg.mod");
  CHECK(program_name({"./a.out", "x"}) == "./a.out");
}

TEST_CASE("stdin rank, numa and signal options", "[launcher][torchrun]") {
  CHECK(parse({"p"}).options.stdin_rank == 0);
  CHECK(parse({"--stdin-rank", "2", "p"}).options.stdin_rank == 2);
  CHECK_FALSE(parse({"--stdin-rank", "none", "p"}).options.stdin_rank.has_value());
  CHECK_THROWS_AS(parse({"--stdin-rank", "-1", "p"}), ConfigError);
  CHECK(parse({"--numa-binding", "socket", "p"}).options.numa_binding == NumaBinding::socket);
  CHECK_THROWS_AS(parse({"--numa-binding", "core-complex", "p"}), ConfigError);
  CHECK(parse_signal_list("SIGTERM,SIGINT,SIGHUP,SIGQUIT") == std::vector<int>{SIGTERM, SIGINT, SIGHUP, SIGQUIT});
  CHECK(parse_signal_list("USR1, 12") == std::vector<int>{SIGUSR1, SIGUSR2});
  CHECK_THROWS_AS(parse_signal_list("SIGKILL"), ConfigError);
  CHECK_THROWS_AS(parse_signal_list("SIGNOPE"), ConfigError);
  CHECK_THROWS_AS(parse_signal_list("99"), ConfigError);
}

TEST_CASE("NUMA cpulists and cpu sets per rank", "[launcher][torchrun]") {
  CHECK(parse_cpulist("0-3,8,10-11") == std::vector<int>{0, 1, 2, 3, 8, 10, 11});
  CHECK(parse_cpulist("3-1").empty());
  CHECK(parse_cpulist("x").empty());
  char tmpl[] = "/tmp/distrun-numa-XXXXXX";
  REQUIRE(mkdtemp(tmpl));
  std::string root = tmpl;
  CHECK_THROWS_AS(numa_cpu_sets(NumaBinding::node, 2, root), ConfigError);  // no NUMA information
  for (int n : {0, 1}) {
    std::string dir = root + "/node/node" + std::to_string(n);
    REQUIRE(system(("mkdir -p " + dir).c_str()) == 0);
    std::ofstream(dir + "/cpulist") << (n == 0 ? "0-3\n" : "4-7\n");
  }
  for (int c = 0; c < 8; ++c) {
    std::string dir = root + "/cpu/cpu" + std::to_string(c) + "/topology";
    REQUIRE(system(("mkdir -p " + dir).c_str()) == 0);
    std::ofstream(dir + "/physical_package_id") << "0\n";
  }
  auto node = numa_cpu_sets(NumaBinding::node, 4, root);
  CHECK(node == std::vector<std::vector<int>>{{0, 1, 2, 3}, {0, 1, 2, 3}, {4, 5, 6, 7}, {4, 5, 6, 7}});
  auto excl = numa_cpu_sets(NumaBinding::exclusive, 4, root);
  CHECK(excl == std::vector<std::vector<int>>{{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  CHECK(numa_cpu_sets(NumaBinding::socket, 1, root)[0].size() == 8);
  CHECK(numa_cpu_sets(NumaBinding::none, 4, root).empty());
  REQUIRE(system(("rm -rf " + root).c_str()) == 0);
}

TEST_CASE("cpu_bind.shares_per_rank", "[launcher][torchrun]") {
  const std::vector<int> four{0, 1, 2, 3};
  CHECK(cpu_shares(CpuBind::core, 2, four) == std::vector<std::vector<int>>{{0, 1}, {2, 3}});
  CHECK(cpu_shares(CpuBind::auto_, 3, four) == std::vector<std::vector<int>>{{0}, {1}, {2, 3}});
  CHECK(cpu_shares(CpuBind::auto_, 4, {5, 7, 9, 11}) == std::vector<std::vector<int>>{{5}, {7}, {9}, {11}});
  // More ranks than CPUs: round robin when asked for, no binding by default.
  CHECK(cpu_shares(CpuBind::core, 3, {0, 1}) == std::vector<std::vector<int>>{{0}, {1}, {0}});
  CHECK(cpu_shares(CpuBind::auto_, 3, {0, 1}).empty());
  CHECK(cpu_shares(CpuBind::none, 2, four).empty());
  CHECK(!allowed_cpus().empty());
}

TEST_CASE("torch's error.json is read into the summary", "[launcher][torchrun]") {
  char path[] = "/tmp/distrun-errjson-XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  std::ofstream(path)
      << R"({"message": {"message": "ValueError: bad shard", "extraInfo": )"
      << R"({"py_callstack": "Traceback (most recent call last):\n  x\nValueError: bad shard\n", "timestamp": "1700000000"}}})";
  auto e = read_error_file(path);
  REQUIRE(e);
  CHECK(e->message == "ValueError: bad shard");
  CHECK(e->timestamp == "1700000000");
  WorkerFailure f;
  f.rank = 3;
  f.program = "train.py";
  f.error_file = path;
  f.stderr_tail = {"noise"};
  std::string s = format_failure(f, "h");
  CHECK(s.find("worker failed: train.py") == 0);
  CHECK(s.find("error      : ValueError: bad shard") != std::string::npos);
  CHECK(s.find("noise") == std::string::npos);
  std::ofstream(path) << R"({"message": "plain c10 text"})";
  CHECK(read_error_file(path)->message == "plain c10 text");
  std::ofstream(path) << "not json";
  CHECK_FALSE(read_error_file(path));
  f.error_file = "/nonexistent/error.json";
  CHECK(format_failure(f, "h").find("    noise") != std::string::npos);  // falls back to the stderr tail
  unlink(path);
}

TEST_CASE("without $PYTHON: the interpreter of a torchrun on PATH, else a python3 that finds torch",
          "[launcher][torchrun]") {
  unsetenv("PYTHON_EXEC");
  unsetenv("PYTHON");
  const std::string saved_path = std::getenv("PATH") ? std::getenv("PATH") : "";
  char tmpl[] = "/tmp/distrun-py-XXXXXX";
  REQUIRE(mkdtemp(tmpl));
  const std::string dir = tmpl;
  {
    // A torchrun whose #! names /bin/sh (any executable will do: it is only named, not run).
    std::ofstream(dir + "/torchrun") << "#!/bin/sh\nexit 0\n";
    chmod((dir + "/torchrun").c_str(), 0755);
    ScopedEnv path("PATH", dir + ":/usr/bin:/bin");
    auto p = python_interpreter();
    CHECK(p.path == "/bin/sh");
    CHECK(p.reason == "the interpreter of " + dir + "/torchrun");
    std::ofstream(dir + "/torchrun") << "#!/usr/bin/env sh\n";
    CHECK(python_interpreter().path == "/usr/bin/sh");
  }
  {
    // A PATH whose python3 cannot find torch: /usr/bin/python3 is asked next, when it can.
    std::ofstream(dir + "/python3") << "#!/bin/sh\nexit 1\n";
    chmod((dir + "/python3").c_str(), 0755);
    unlink((dir + "/torchrun").c_str());
    ScopedEnv path("PATH", dir);  // no torchrun there
    auto p = python_interpreter();
    const bool system_torch = access("/usr/bin/python3", X_OK) == 0 && p.path == "/usr/bin/python3";
    if (!system_torch) CHECK(p.path == dir + "/python3");
    CHECK((system_torch ? p.reason == "the first python3 that finds torch"
                        : p.reason == "python3 on PATH (no interpreter with torch found)"));
  }
  setenv("PATH", saved_path.c_str(), 1);
  // A script without .py in the current folder runs through python, as torchrun runs it.
  char cwd[4096];
  REQUIRE(getcwd(cwd, sizeof cwd));
  REQUIRE(chdir(dir.c_str()) == 0);
  std::ofstream("train") << "print(1)\n";
  CHECK(parse({"train", "--x"}).options.program_kind == ProgramKind::python_script);
  CHECK(parse({"./train"}).options.program_kind == ProgramKind::python_script);  // not executable
  chmod("train", 0755);
  CHECK(parse({"./train"}).options.program_kind == ProgramKind::as_is);        // executable: run as given
  CHECK(parse({"train"}).options.program_kind == ProgramKind::python_script);  // exec would not look here
  CHECK(parse({"sh", "-c", "true"}).options.program_kind == ProgramKind::as_is);
  CHECK(parse({"--no-python", "train"}).options.program_kind == ProgramKind::as_is);
  REQUIRE(chdir(cwd) == 0);
  std::system(("rm -rf " + dir).c_str());
}
