// Each branch of the choice of a group's path among the registered ones, on made-up members: no
// processes, no store, no segment (whether a one-host path builds is the test's answer to
// build_one_host, which counts its calls).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <vector>

#include "distrun/core/error.hpp"
#include "distrun/host/path_policy.hpp"

using namespace distrun;

namespace {

const std::string kSettings = "DISTRUN_TRANSPORT=auto DISTRUN_ALGO=auto";

// Members on the given hosts, global rank 10 + group rank, all with kSettings.
std::vector<GroupMember> on_hosts(const std::vector<std::string>& hosts) {
  std::vector<GroupMember> members;
  for (size_t r = 0; r < hosts.size(); ++r) members.push_back({10 + int(r), kSettings, hosts[r]});
  return members;
}

struct Verdict {
  PathChoice choice;
  int asked = 0;  // calls of map_segment
};

PathSettings settings(PathPreference preference = PathPreference::Auto, Hierarchy hierarchy = Hierarchy::Auto) {
  PathSettings s;
  s.transport = preference;
  s.hierarchy = hierarchy;
  return s;
}

Verdict choose(const std::vector<GroupMember>& members, int rank, PathPreference preference = PathPreference::Auto,
               Hierarchy hierarchy = Hierarchy::Auto, bool maps = true) {
  Verdict v;
  v.choice = choose_path(members, rank, settings(preference, hierarchy), [&](const PathEntry& e) {
    CHECK(e.reach == PathEntry::OneHost);
    ++v.asked;
    return maps;
  });
  return v;
}

bool is(const PathChoice& c, const std::string& name) { return c.path && c.path->name == name && !c.hierarchical; }

}  // namespace

TEST_CASE("a group on one host takes shared memory when its segment maps") {
  const auto v = choose(on_hosts({"a", "a", "a"}), 1);
  CHECK(is(v.choice, "shm"));
  CHECK(v.asked == 1);
}

TEST_CASE("a group on one host whose segment does not map takes tcp, unless shared memory is required") {
  const auto v = choose(on_hosts({"a", "a"}), 0, PathPreference::Auto, Hierarchy::Auto, false);
  CHECK(is(v.choice, "socket"));
  CHECK(v.asked == 1);
  CHECK_THROWS_AS(choose(on_hosts({"a", "a"}), 0, PathPreference::SharedMemory, Hierarchy::Auto, false), BackendError);
}

TEST_CASE("tcp when asked for, without mapping a segment") {
  const auto v = choose(on_hosts({"a", "a"}), 0, PathPreference::Tcp);
  CHECK(is(v.choice, "socket"));
  CHECK(v.asked == 0);
}

TEST_CASE("a group of one rank takes tcp and compares nothing") {
  const auto v = choose({{3, "anything", "a"}}, 0, PathPreference::SharedMemory);
  CHECK(is(v.choice, "socket"));
  CHECK(v.asked == 0);
}

TEST_CASE("members whose settings differ are a config error naming each difference, before anything maps") {
  auto members = on_hosts({"a", "a", "a"});
  members[2].settings = "DISTRUN_TRANSPORT=tcp DISTRUN_ALGO=auto";
  int asked = 0;
  try {
    choose_path(members, 0, settings(), [&](const PathEntry&) { return ++asked, true; });
    FAIL("no error");
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    CHECK(what.find("rank 10 has " + kSettings) != std::string::npos);
    CHECK(what.find("rank 12 has DISTRUN_TRANSPORT=tcp") != std::string::npos);
    CHECK(what.find("rank 11") == std::string::npos);
  }
  CHECK(asked == 0);
}

TEST_CASE("hosts of one rank each take tcp, and shared memory required there is an error") {
  const auto v = choose(on_hosts({"a", "b", "c"}), 2);
  CHECK(is(v.choice, "socket"));
  CHECK(v.asked == 0);
  CHECK_THROWS_AS(choose(on_hosts({"a", "b"}), 0, PathPreference::SharedMemory), BackendError);
}

TEST_CASE("hosts of several ranks each go hierarchical, with each rank's host and place") {
  // Hosts in the order of their first rank; places in group rank order within a host.
  const auto members = on_hosts({"b", "a", "b", "c", "a", "c"});
  const std::vector<std::vector<int>> want{{0, 2}, {1, 4}, {3, 5}};
  const int host_of[] = {0, 1, 0, 2, 1, 2}, slice_of[] = {0, 0, 1, 0, 1, 1};
  for (int rank = 0; rank < 6; ++rank) {
    const auto v = choose(members, rank);
    REQUIRE(v.choice.hierarchical);
    CHECK(v.choice.path->name == "socket");
    CHECK(v.choice.ranks_on_host == want);
    CHECK(v.choice.host == host_of[rank]);
    CHECK(v.choice.slice == slice_of[rank]);
    CHECK(v.asked == 0);
  }
}

TEST_CASE("uneven hosts, or a flat hierarchy, take tcp") {
  CHECK(is(choose(on_hosts({"a", "a", "b"}), 0).choice, "socket"));
  CHECK(is(choose(on_hosts({"a", "a", "b", "b"}), 0, PathPreference::Auto, Hierarchy::Flat).choice, "socket"));
  CHECK(is(choose(on_hosts({"a", "a", "b", "b"}), 0, PathPreference::Tcp).choice, "socket"));
}

TEST_CASE("the paths describe themselves: one on one host, the others between hosts by DISTRUN_TCP's word") {
  std::vector<std::string> one_host, hosts;
  for (const auto& e : registered_paths()) (e.reach == PathEntry::OneHost ? one_host : hosts).push_back(e.name);
  CHECK(one_host == std::vector<std::string>{"shm"});
  CHECK(hosts == std::vector<std::string>{"socket", "gloo"});
  PathSettings s = settings();
  s.tcp = "gloo";
  const auto c = choose_path(on_hosts({"a", "b"}), 0, s, [](const PathEntry&) { return true; });
  CHECK(is(c, "gloo"));
  CHECK(s.shared_settings().find("DISTRUN_TCP=gloo") != std::string::npos);
  CHECK(settings().shared_settings().find("DISTRUN_TCP=socket") != std::string::npos);
  s.tcp = "carrier-pigeon";
  CHECK_THROWS_AS(choose_path(on_hosts({"a", "b"}), 0, s, [](const PathEntry&) { return true; }), ConfigError);
}

TEST_CASE("DISTRUN_TCP takes the names of the paths between hosts, and no other") {
  const char* found = std::getenv("DISTRUN_TCP");
  const std::string before = found ? found : "";
  PathSettings s;
  setenv("DISTRUN_TCP", "gloo", 1);
  s.read_env();
  CHECK(s.tcp == "gloo");
  setenv("DISTRUN_TCP", "shm", 1);
  CHECK_THROWS_WITH(s.read_env(), "DISTRUN_TCP='shm': expected socket or gloo");
  if (found)
    setenv("DISTRUN_TCP", before.c_str(), 1);
  else
    unsetenv("DISTRUN_TCP");
}
