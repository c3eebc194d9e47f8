// The engine's pure parts: statistics, nccl-tests' size sweep and names, the collective table,
// and the qualify judge (slow pairs, node or link, bisection, rounds, hostlists).
#include <catch2/catch.hpp>

#include <set>

#include "distrun/bench/collectives.hpp"
#include "distrun/bench/qualify_analysis.hpp"
#include "distrun/bench/report.hpp"
#include "distrun/bench/statistics.hpp"
#include "distrun/bench/vocabulary.hpp"
#include "distrun/core/error.hpp"

using namespace distrun::bench;

TEST_CASE("percentiles interpolate between ranks as numpy does", "[bench]") {
  const Summary s = summarize({5, 1, 4, 2, 3});
  CHECK(s.samples == 5);
  CHECK(s.min == 1);
  CHECK(s.max == 5);
  CHECK(s.p50 == 3);
  CHECK(s.p90 == Approx(4.6));
  CHECK(s.p99 == Approx(4.96));
  CHECK(s.mean == 3);
  CHECK(s.cv == Approx(std::sqrt(2.0) / 3));
  CHECK(summarize({}).samples == 0);
  CHECK(median({1, 10, 2, 9}) == Approx(5.5));
}

TEST_CASE("sizes sweep as nccl-tests' -b -e -f -i", "[bench]") {
  CHECK(size_sweep(8, 128, 2, 0) == std::vector<int64_t>{8, 16, 32, 64, 128});
  CHECK(size_sweep(8, 100, 4, 0) == std::vector<int64_t>{8, 32});
  CHECK(size_sweep(1000, 3500, 1, 1000) == std::vector<int64_t>{1000, 2000, 3000});
  CHECK(size_sweep(64, 64, 1, 0) == std::vector<int64_t>{64});
  CHECK_THROWS_AS(size_sweep(128, 8, 2, 0), distrun::ConfigError);
  CHECK_THROWS_AS(size_sweep(8, 128, 1, 0), distrun::ConfigError);
  CHECK_THROWS_AS(size_sweep(1, int64_t(1) << 40, 1, 1), distrun::ConfigError);  // too many sizes
}

TEST_CASE("type names are nccl-tests'", "[bench]") {
  CHECK(std::string(type_name(distrun::DType::Float32)) == "float");
  CHECK(std::string(type_name(distrun::DType::Float16)) == "half");
  CHECK(parse_type("bfloat16") == distrun::DType::BFloat16);
  CHECK(parse_type("double") == distrun::DType::Float64);
  CHECK(parse_type("float32") == distrun::DType::Float32);
  CHECK(!parse_type("quad"));
  CHECK(all_types().size() == 8);
}

TEST_CASE("the table: every collective once, with nccl-tests' bus factors", "[bench]") {
  std::set<std::string> names;
  for (const auto& c : collectives()) names.insert(c.name);
  CHECK(names.size() == 9);
  CHECK(find_collective("all_reduce")->bus_factor(4) == Approx(1.5));
  CHECK(find_collective("all_gather")->bus_factor(4) == Approx(0.75));
  CHECK(find_collective("reduce_scatter")->bus_factor(8) == Approx(0.875));
  CHECK(find_collective("all_to_all")->bus_factor(2) == Approx(0.5));
  CHECK(find_collective("broadcast")->bus_factor(8) == 1);
  CHECK(find_collective("send_recv")->bus_factor(2) == 1);
  CHECK(find_collective("nope") == nullptr);
  // Split layouts round to the ranks; whole ones keep the count.
  CHECK(size_count(*find_collective("all_gather"), 1000, 4, 3).count == 249);
  CHECK(size_count(*find_collective("all_reduce"), 1000, 4, 3).count == 250);
  CHECK(size_count(*find_collective("all_to_all"), 4, 4, 8).count == 8);
}

TEST_CASE("expected results follow from the fill pattern", "[bench]") {
  // all_reduce sum over 3 ranks of (r + e) % 3 + 1 is 6 for every element.
  RunArgs a{distrun::ReduceOp::Sum, 0, 1, 3, 4, {}};
  CHECK(find_collective("all_reduce")->expected(a, 7, false) == 6);
  // all_gather: block k comes from rank k.
  CHECK(find_collective("all_gather")->expected(a, 5, false) == fill_value(a.op, 3, 1, 1));
  // send_recv: from the previous rank.
  CHECK(find_collective("send_recv")->expected(a, 2, false) == fill_value(a.op, 3, 0, 2));
  // prod stays exact: one factor 2 per element.
  CHECK(reduced_value(distrun::ReduceOp::Prod, 4, 5, false) == 2);
  CHECK(reduced_value(distrun::ReduceOp::Avg, 3, 0, true) == 2);
  // reduce has a result on the root only.
  CHECK(!find_collective("reduce")->has_result(a));
}

namespace {
std::vector<NodeId> four() { return {{"n", "10.0.0.1"}, {"n", "10.0.0.2"}, {"n", "10.0.0.3"}, {"n", "10.0.0.4"}}; }
std::vector<PairResult> all_pairs(double slow_bw, std::set<int> slow_nodes, std::set<std::pair<int, int>> slow_links) {
  std::vector<PairResult> pairs;
  for (int a = 0; a < 4; ++a)
    for (int b = a + 1; b < 4; ++b) {
      PairResult p;
      p.a = a;
      p.b = b;
      const bool slow = slow_nodes.count(a) || slow_nodes.count(b) || slow_links.count({a, b});
      p.bw_gbps = slow ? slow_bw : 1.0 + 0.01 * (a + b);
      p.lat_us = 10;
      pairs.push_back(p);
    }
  return pairs;
}
}  // namespace

TEST_CASE("a node whose every pair is slow is the suspect, a lone slow pair is a link", "[bench]") {
  auto pairs = all_pairs(0.01, {2}, {});
  Judgement j = judge(four(), pairs, 0.5, std::nullopt);
  CHECK(j.suspect_nodes == std::vector<int>{2});
  CHECK(j.suspect_links.empty());
  CHECK(j.nodes[0].verdict == Verdict::Ok);
  CHECK(j.nodes[2].verdict == Verdict::Suspect);

  pairs = all_pairs(0.01, {}, {{1, 3}});
  j = judge(four(), pairs, 0.5, std::nullopt);
  CHECK(j.suspect_nodes.empty());
  CHECK(j.suspect_links == std::vector<std::pair<int, int>>{{1, 3}});
  CHECK(j.nodes[1].verdict == Verdict::SuspectLink);

  pairs = all_pairs(0.01, {}, {});
  j = judge(four(), pairs, 0.5, std::nullopt);
  CHECK(j.suspect_nodes.empty());
  CHECK(j.suspect_links.empty());
}

TEST_CASE("a baseline sets the threshold, capped at its median", "[bench]") {
  auto pairs = all_pairs(0.01, {}, {});  // all about 1 GB/s
  Baseline base;
  base.median_bw_gbps = 4;
  base.pairs.push_back({{"n", "10.0.0.1"}, {"n", "10.0.0.2"}, 10, 10});
  // Half of 4 GB/s: every pair is now slow, so every node is a suspect.
  Judgement j = judge(four(), pairs, 0.5, base);
  CHECK(j.suspect_nodes.size() == 4);
  CHECK(pairs[0].threshold_gbps == Approx(2));  // 10 GB/s capped at the median
  base.median_bw_gbps = 1.5;
  j = judge(four(), pairs, 0.5, base);
  CHECK(j.suspect_nodes.empty());
}

TEST_CASE("bisection measures the ends of a slow pair against healthy nodes", "[bench]") {
  std::vector<PairResult> pairs(2);
  pairs[0].a = 0, pairs[0].b = 3, pairs[0].slow = true;
  pairs[1].a = 1, pairs[1].b = 2;
  auto plan = bisection_pairs(4, pairs);
  CHECK(plan == std::vector<std::pair<int, int>>{{0, 1}, {0, 2}, {1, 3}, {2, 3}});
  pairs[0].slow = false;
  CHECK(bisection_pairs(4, pairs).empty());
}

TEST_CASE("rounds of disjoint pairs cover every pair once", "[bench]") {
  for (int n : {2, 3, 4, 7, 8}) {
    std::set<std::pair<int, int>> seen;
    for (const auto& round : pair_rounds(n)) {
      std::set<int> busy;
      for (const auto& [a, b] : round) {
        CHECK(busy.insert(a).second);
        CHECK(busy.insert(b).second);
        CHECK(seen.insert({a, b}).second);
      }
    }
    CHECK(int(seen.size()) == n * (n - 1) / 2);
  }
  CHECK(pair_rounds(8, 2).size() == 2);
}

TEST_CASE("suspects as a SLURM hostlist", "[bench]") {
  CHECK(compress_hostlist({"node03", "node01", "node02", "node07", "login"}) == "node[01-03,07],login");
  CHECK(compress_hostlist({"gpu5"}) == "gpu5");
  CHECK(compress_hostlist({"a1", "a1", "a2"}) == "a[1-2]");
  CHECK(compress_hostlist({}).empty());
}

TEST_CASE("CSV has the JSON record's keys and values", "[bench]") {
  nlohmann::ordered_json r{{"collective", "all_reduce"}, {"bytes", 8}, {"wrong", nullptr}};
  auto lines = csv_lines({r});
  REQUIRE(lines.size() == 2);
  CHECK(lines[0] == "collective,bytes,wrong");
  CHECK(lines[1] == "\"all_reduce\",8,");
}
