// SLURM hostlist expansion.
#include <catch2/catch.hpp>

#include "distrun/core/error.hpp"
#include "distrun/env/hostlist.hpp"

using distrun::expand_hostlist;
using V = std::vector<std::string>;

TEST_CASE("hostlists expand like scontrol show hostnames") {
  CHECK(expand_hostlist("node01") == V{"node01"});
  CHECK(expand_hostlist("node[01-04,07]") == V{"node01", "node02", "node03", "node04", "node07"});
  CHECK(expand_hostlist("rack[1-2]-n[01-02]") == V{"rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"});
  CHECK(expand_hostlist("a,b[1-3],c") == V{"a", "b1", "b2", "b3", "c"});
  CHECK(expand_hostlist("n[8-11]") == V{"n8", "n9", "n10", "n11"});
  CHECK(expand_hostlist("n[098-101]") == V{"n098", "n099", "n100", "n101"});
}

TEST_CASE("malformed hostlists are clear errors") {
  for (const char* bad :
       {"node[01-04", "node]1[", "node[4-1]", "node[a-b]", "", "a,,b", "n[1-2", "n[[1]]", "n[]", "n[1-99999999999]"}) {
    INFO(bad);
    CHECK_THROWS_AS(expand_hostlist(bad), distrun::ConfigError);
  }
}
