// Option parsing: torchrun's dash and underscore spellings, modes, and bad command lines.
#include <catch2/catch.hpp>

#include "distrun/core/error.hpp"
#include "options.hpp"

using namespace distrun::launcher;

namespace {
ParseResult parse(std::vector<std::string> args) {
  args.insert(args.begin(), "distrun");
  std::vector<const char*> argv;
  for (auto& a : args) argv.push_back(a.c_str());
  return parse_launch_options(int(argv.size()), argv.data());
}
}  // namespace

TEST_CASE("dash and underscore spellings give the same options", "[launcher][options]") {
  for (bool underscore : {false, true}) {
    auto n = [&](std::string name) {
      if (underscore)
        for (size_t i = 2; i < name.size(); ++i)
          if (name[i] == '-') name[i] = '_';
      return name;
    };
    auto r = parse({n("--nproc-per-node"),
                    "4",
                    n("--nnodes"),
                    "2",
                    n("--node-rank"),
                    "1",
                    n("--master-addr"),
                    "h0",
                    n("--master-port"),
                    "1234",
                    n("--max-restarts"),
                    "3",
                    n("--run-id"),
                    "job7",
                    n("--log-dir"),
                    "/tmp/l",
                    n("--local-ranks-filter"),
                    "0,2",
                    "--redirects",
                    "3",
                    "--tee",
                    "0:1",
                    "prog",
                    "a",
                    "--b"});
    const auto& o = r.options;
    CHECK(o.nproc_per_node == "4");
    CHECK(o.nnodes == "2");
    CHECK(o.node_rank == 1);
    CHECK(o.master_addr == "h0");
    CHECK(o.master_port == 1234);
    CHECK(o.max_restarts == 3);
    CHECK(o.run_id == "job7");
    CHECK(o.log_dir == "/tmp/l");
    CHECK(o.local_ranks_filter == "0,2");
    CHECK(o.redirects == "3");
    CHECK(o.tee == "0:1");
    CHECK(o.mode == RunMode::program);
    CHECK(o.command == std::vector<std::string>{"prog", "a", "--b"});
  }
}

TEST_CASE("nproc alias and option=value spelling", "[launcher][options]") {
  CHECK(parse({"--nproc", "3", "x"}).options.nproc_per_node == "3");
  CHECK(parse({"--nproc_per_node=gpu", "x"}).options.nproc_per_node == "gpu");
  CHECK(parse({"--standalone", "x"}).options.standalone);
  CHECK(parse({"--rdzv_endpoint", "h:5", "x"}).options.rdzv_endpoint == "h:5");
}

TEST_CASE("a lone yaml file is a scenario, -- makes anything a program", "[launcher][options]") {
  auto s = parse({"--results", "r.jsonl", "--backend", "gloo", "--timeout", "5", "--log-level", "debug", "s.yaml"});
  CHECK(s.options.mode == RunMode::scenario);
  CHECK(s.options.results == std::string("r.jsonl"));
  CHECK(s.options.backend == std::string("gloo"));
  CHECK(s.options.timeout == Approx(5));
  CHECK(s.options.log_level == std::string("debug"));
  CHECK(parse({"--check", "s.yml"}).options.check_only);
  auto p = parse({"--", "cat", "s.yaml"});
  CHECK(p.options.mode == RunMode::program);
  CHECK(p.options.command == std::vector<std::string>{"cat", "s.yaml"});
  CHECK(parse({"--", "s.yaml"}).options.mode == RunMode::program);
}

TEST_CASE("bad command lines are ConfigErrors", "[launcher][options]") {
  CHECK_THROWS_AS(parse({}), distrun::ConfigError);
  CHECK_THROWS_AS(parse({"--bogus", "x"}), distrun::ConfigError);
  CHECK_THROWS_AS(parse({"--launcher", "pbs", "x"}), distrun::ConfigError);
  CHECK_THROWS_AS(parse({"--master-port", "70000", "x"}), distrun::ConfigError);
  CHECK_THROWS_AS(parse({"--node-rank", "-1", "x"}), distrun::ConfigError);
  CHECK_THROWS_AS(parse({"s.yaml", "extra"}), distrun::ConfigError);
  CHECK_THROWS_AS(parse({"--check", "--", "prog"}), distrun::ConfigError);
}

TEST_CASE("unique prefixes of long options, as argparse takes them", "[launcher][options]") {
  auto o = parse({"--nproc_per", "3", "--max-res=2", "--role", "r", "--stan", "prog", "--nproc_per", "x"}).options;
  CHECK(o.nproc_per_node == "3");
  CHECK(o.max_restarts == 2);
  CHECK(o.standalone);
  // The program's own arguments are left alone.
  CHECK(o.command == std::vector<std::string>{"prog", "--nproc_per", "x"});
  CHECK(parse({"-r", "3", "--tee", "1", "--nnod", "1", "x"}).options.redirects == "3");
  CHECK(parse({"--nproc", "2", "x"}).options.nproc_per_node == "2");  // an exact name wins over longer ones
  CHECK_THROWS_WITH(parse({"--n", "2", "x"}), Catch::Contains("ambiguous option: --n could match"));
  CHECK_THROWS_WITH(parse({"--rdzv", "x", "y"}), Catch::Contains("--rdzv-backend"));
}

TEST_CASE("max restarts and node rank: a count, said plainly", "[launcher][options]") {
  try {
    parse({"--max-restarts", "-1", "x"});
    FAIL("accepted -1");
  } catch (const distrun::ConfigError& e) {
    const std::string text = e.what();
    CHECK(text.find("expected a whole number from 0 to 1000000, got -1") != std::string::npos);
    CHECK(text.size() < 200);  // no 300-digit range
  }
  CHECK(parse({"--max-restarts", "5", "x"}).options.max_restarts == 5);
  CHECK_THROWS_WITH(parse({"--node-rank", "x1", "x"}),
                    Catch::Contains("expected a whole number from 0 to 1000000, got x1"));
}
