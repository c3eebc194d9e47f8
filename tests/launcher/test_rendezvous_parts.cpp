// The rendezvous' pieces that need no network: the failure record and plan texts agents
// exchange (malformed ones are MalformedMessage, never a crash), the job secret's checks, and the
// bound workers' port.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <future>
#include <set>

#include "distrun/core/error.hpp"
#include "job_secret.hpp"
#include "ports.hpp"
#include "rendezvous/rendezvous.hpp"

using namespace distrun;
using namespace distrun::launcher;

namespace {

EnvLookup env_with(std::optional<std::string> secret) {
  return [secret](const std::string& name) -> std::optional<std::string> {
    if (name == "DISTRUN_STORE_SECRET") return secret;
    return std::nullopt;
  };
}

std::string temp_file(const std::string& content, mode_t mode) {
  char path[] = "/tmp/distrun_secret_test_XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  REQUIRE(write(fd, content.data(), content.size()) == ssize_t(content.size()));
  close(fd);
  chmod(path, mode);
  return path;
}

}  // namespace

TEST_CASE("a failure record survives the store, causes with newlines included", "[launcher][rendezvous]") {
  FailureRecord r{true, "n1", 1, 3, "worker ended with exit code 3\nsecond line"};
  FailureRecord back = FailureRecord::decode(r.encode());
  CHECK(back.final);
  CHECK(back.host == "n1");
  CHECK(back.node_rank == 1);
  CHECK(back.rank == 3);
  CHECK(back.cause == r.cause);
  CHECK(back.summary() == "host n1, node rank 1, rank 3: " + r.cause);
  FailureRecord agent{false, "n0", 0, -1, "distrun stopped by SIGTERM"};
  CHECK(FailureRecord::decode(agent.encode()).summary() == "host n0, node rank 0: distrun stopped by SIGTERM");
  // Elastic: a node asking to join has no rank yet, and its record says it joins.
  FailureRecord join{false, "n2", -1, -1, "asked to join"};
  join.joining = true;
  FailureRecord j = FailureRecord::decode(join.encode());
  CHECK(j.joining);
  CHECK_FALSE(j.final);
  CHECK(j.summary() == "host n2: asked to join");
  CHECK_FALSE(FailureRecord::decode(r.encode()).joining);
  // A frozen worker's record says so: it takes the place of the ranks that gave up on it.
  FailureRecord frozen{false, "n1", 1, 3, "frozen, not ended (SIGSTOP)"};
  frozen.frozen = true;
  FailureRecord f = FailureRecord::decode(frozen.encode());
  CHECK(f.frozen);
  CHECK_FALSE(f.final);
  CHECK_FALSE(f.joining);
  CHECK_FALSE(FailureRecord::decode(r.encode()).frozen);
}

TEST_CASE("a failure record from another node shows its control characters escaped", "[launcher][rendezvous]") {
  FailureRecord evil{true, "h\x1b]0;owned\x07", 1, 3, "exit 3\n\x1b[2J\x1b[31mred\ttab\r"};
  FailureRecord back = FailureRecord::decode(evil.encode());
  CHECK(back.host == "h\\x1b]0;owned\\x07");
  CHECK(back.cause == "exit 3\n\\x1b[2J\\x1b[31mred\ttab\\x0d");
  CHECK(back.summary().find('\x1b') == std::string::npos);
}

TEST_CASE("malformed failure records are MalformedMessage", "[launcher][rendezvous]") {
  for (const char* bad : {"", "1", "4\nh\n0\n0\nx", "13\nh\n0\n0\nx", "1\nh\n-2\n0\nx", "1\nh\nzero\n0\nx",
                          "1\nh\n0\n-5\nx", "1\nh\n99999999999\n0\nx", "1\nh\n1-2\n0\nx", "1\nh\n-\n0\nx"})
    CHECK_THROWS_AS(FailureRecord::decode(bad), MalformedMessage);
}

TEST_CASE("the plan node 0 publishes is parsed strictly", "[launcher][rendezvous]") {
  PlanText p = parse_plan("ok\n29500\nabc123\n2 n0\n4 n1", 2);
  CHECK_FALSE(p.refused);
  CHECK(p.port == 29500);
  CHECK(p.salt == "abc123");
  CHECK(p.nproc == std::vector<int>{2, 4});
  CHECK(p.hosts == std::vector<std::string>{"n0", "n1"});
  PlanText r = parse_plan("refused\n--results was given on node(s) 0 but not on node(s) 1", 2);
  CHECK(r.refused);
  CHECK(r.message.find("--results") == 0);
  for (const char* bad : {"", "ok", "ok\n29500\nabc\n2 n0", "ok\n70000\nabc\n2 n0\n2 n1", "ok\n29500\n\n2 n0\n2 n1",
                          "ok\n29500\nabc\n0 n0\n2 n1", "ok\n29500\nabc\n2\n2 n1", "ko\n29500\nabc\n2 n0\n2 n1"})
    CHECK_THROWS_AS(parse_plan(bad, 2), MalformedMessage);
  // The encoder writes what the parser reads; a salt must be one printable token; the
  // ranks of all nodes must fit an int; a trailing newline is one line too many.
  CHECK(parse_plan(p.encode(), 2).hosts == p.hosts);
  CHECK(parse_plan(r.encode(), 2).message == r.message);
  for (const char* bad : {"ok\n29500\nab c\n2 n0\n2 n1", "ok\n29500\nabc\n2 n0\n2 n1\n", "ok\n29500\nabc\n2 n0\n2 "})
    CHECK_THROWS_AS(parse_plan(bad, 2), MalformedMessage);
  std::string huge = "ok\n29500\nabc";
  for (int n = 0; n < 1025; ++n) huge += "\n1048576 n" + std::to_string(n);
  CHECK_THROWS_AS(parse_plan(huge, 1025), MalformedMessage);
  CHECK(parse_plan(huge.substr(0, huge.rfind('\n')), 1024).nproc.size() == 1024);
}

TEST_CASE("a record with an empty cause, or a host with a line break, still decodes", "[launcher][rendezvous]") {
  FailureRecord empty{false, "h", 2, 5, ""};
  CHECK(FailureRecord::decode(empty.encode()).summary() == empty.summary());
  FailureRecord odd{true, "a\nb", 1, -1, "x"};
  FailureRecord back = FailureRecord::decode(odd.encode());
  CHECK(back.host == "a b");
  CHECK(back.node_rank == 1);
  CHECK(back.cause == "x");
}

TEST_CASE("a node's entry is parsed strictly", "[launcher][rendezvous]") {
  NodeEntry e = NodeEntry::decode(NodeEntry{4, true, "n1"}.encode());
  CHECK(e.nproc == 4);
  CHECK(e.results_given);
  CHECK(e.host == "n1");
  CHECK(NodeEntry::decode(NodeEntry{1, false, "a b"}.encode()).host == "a?b");
  for (const char* bad : {"", "2", "2 1", "2 1 ", "0 1 h", "2 2 h", "2 1 h h", "x 1 h", "2  1 h"})
    CHECK_THROWS_AS(NodeEntry::decode(bad), MalformedMessage);
}

TEST_CASE("an elastic round's plan is parsed strictly", "[launcher][rendezvous]") {
  RoundPlan p;
  p.port = 29501;
  p.salt = "abc";
  p.restart_count = 2;
  p.ids = {0, 3};
  p.nproc = {2, 4};
  p.hosts = {"n0", "n3"};
  RoundPlan back = parse_round_plan(p.encode());
  CHECK(back.port == 29501);
  CHECK(back.salt == "abc");
  CHECK(back.restart_count == 2);
  CHECK(back.ids == p.ids);
  CHECK(back.nproc == p.nproc);
  CHECK(back.hosts == p.hosts);
  for (const char* bad : {"", "round\n1\nabc\n0", "ok\n1\nabc\n0\n0 2 n0", "round\n1\nabc\n-1\n0 2 n0",
                          "round\n1\nabc\n0\n3 2 n3\n0 2 n0", "round\n1\nabc\n0\n0 0 n0", "round\n1\n\n0\n0 2 n0",
                          "round\n1\nabc\n0\n0 2"})
    CHECK_THROWS_AS(parse_round_plan(bad), StoreError);
}

TEST_CASE("the job secret: the environment, or a private file", "[launcher][secret]") {
  CHECK_FALSE(load_job_secret("", env_with(std::nullopt)));
  CHECK_FALSE(load_job_secret("", env_with("")));
  CHECK(*load_job_secret("", env_with("s3")) == "s3");
  std::string good = temp_file("from-file\n", 0600);
  CHECK(*load_job_secret(good, env_with("env")) == "from-file");  // the file wins, newline dropped
  std::string loose = temp_file("x", 0644);
  CHECK_THROWS_WITH(load_job_secret(loose, env_with(std::nullopt)), Catch::Contains("chmod 600"));
  std::string empty = temp_file("\n", 0600);
  CHECK_THROWS_AS(load_job_secret(empty, env_with(std::nullopt)), ConfigError);
  std::string link = good + ".link";
  REQUIRE(symlink(good.c_str(), link.c_str()) == 0);
  CHECK_THROWS_AS(load_job_secret(link, env_with(std::nullopt)), ConfigError);  // never followed
  CHECK_THROWS_AS(load_job_secret("/nonexistent/secret", env_with(std::nullopt)), ConfigError);
  CHECK(missing_secret_message().find("DISTRUN_STORE_SECRET") != std::string::npos);
  for (auto& p : {good, loose, empty, link}) unlink(p.c_str());
}

TEST_CASE("a FIFO as the secret file is refused at once, without waiting for a writer", "[launcher][secret]") {
  char dir[] = "/tmp/distrun_fifo_test_XXXXXX";
  REQUIRE(mkdtemp(dir));
  const std::string fifo = std::string(dir) + "/secret";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  auto loading = std::async(std::launch::async, [&] { return load_job_secret(fifo, env_with(std::nullopt)); });
  if (loading.wait_for(std::chrono::seconds(5)) == std::future_status::timeout) {
    int w = open(fifo.c_str(), O_WRONLY | O_NONBLOCK);  // lets the blocked open go
    FAIL("load_job_secret waited for a writer on a FIFO");
    close(w);
  }
  CHECK_THROWS_WITH(loading.get(), Catch::Contains("not a regular file"));
  unlink(fifo.c_str());
  rmdir(dir);
}

TEST_CASE("a job secret under 128 bits is refused, saying how to make one", "[launcher][secret]") {
  for (const char* weak : {"x", "s3cret", "correct horse battery", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                           "0123456789012345678901234567890123456789"})
    CHECK_THROWS_WITH(check_secret_strength(weak, "DISTRUN_STORE_SECRET"),
                      Catch::Contains("DISTRUN_STORE_SECRET") && Catch::Contains("openssl rand -hex 16"));
  for (int i = 0; i < 5000; ++i) {  // every `openssl rand -hex 16` passes, not most
    const std::string s = random_hex(16);
    INFO(s);
    REQUIRE_NOTHROW(check_secret_strength(s, "DISTRUN_STORE_SECRET"));
  }
  std::string ends_alike = random_hex(16);
  ends_alike.back() = ends_alike.front();  // not a period
  CHECK_NOTHROW(check_secret_strength(ends_alike, "DISTRUN_STORE_SECRET"));
  CHECK_NOTHROW(check_secret_strength("q3Zx9Kp0Lr7YwV2sNf8Hc1Jt5Bm4Gd6Ue0Aa3Ri9Oo=", "DISTRUN_STORE_SECRET"));
}

TEST_CASE("the workers' secret is derived alike on every node, fresh per salt and attempt", "[launcher][secret]") {
  const std::string job = random_hex(16), salt = random_hex(16);
  const std::string s = workers_secret(job, salt, "run", 0);
  CHECK(s == workers_secret(job, salt, "run", 0));
  CHECK(s.size() == 64);
  CHECK(s.find(job) == std::string::npos);
  std::set<std::string> all{s, workers_secret(job, random_hex(16), "run", 0), workers_secret(job, salt, "run", 1),
                            workers_secret(job, salt, "run2", 0), workers_secret(random_hex(16), salt, "run", 0)};
  CHECK(all.size() == 5);
}

TEST_CASE("a bound workers' port is held: binding it again is a clear ConfigError", "[launcher][ports]") {
  BoundPort held("127.0.0.1", 0);
  REQUIRE(held.fd() >= 0);
  REQUIRE(held.port() != 0);
  CHECK_THROWS_WITH(BoundPort("127.0.0.1", held.port()), Catch::Contains("already in use"));
  BoundPort moved = std::move(held);
  CHECK(moved.fd() >= 0);
  CHECK(held.fd() == -1);  // NOLINT(bugprone-use-after-move): the moved-from port is empty
  CHECK_THROWS_AS(BoundPort("not-an-ip", 0), ConfigError);
}
