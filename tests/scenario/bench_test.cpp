// Bench sizes, counts and bus-bandwidth factors as nccl-tests defines them.
#include <catch2/catch.hpp>

#include "distrun/scenario/ops/bench.hpp"
#include "distrun/scenario/load/loader.hpp"
#include "test_util.hpp"

using namespace distrun::scenario;

TEST_CASE("byte sizes use powers of 1024", "[bench]") {
  CHECK(parse_byte_size("512") == 512);
  CHECK(parse_byte_size("1K") == 1024);
  CHECK(parse_byte_size("64M") == 64LL << 20);
  CHECK(parse_byte_size("1G") == 1LL << 30);
  CHECK(parse_byte_size("1.5K") == 1536);
  CHECK(!parse_byte_size("1X"));
  CHECK(!parse_byte_size("abc"));
  CHECK(byte_size_range(1024, 16384, 4) == std::vector<int64_t>{1024, 4096, 16384});
  CHECK(byte_size_range(1024, 10000, 2) == std::vector<int64_t>{1024, 2048, 4096, 8192});
}

TEST_CASE("bench steps load their sizes", "[bench]") {
  auto sc = load_scenario_text("b.yaml",
                               "steps:\n  - op: bench\n    collective: all_gather\n    bytes: {min: 1K, max: 4K}\n");
  CHECK(sc.steps[0].args().more().bench.bytes == std::vector<int64_t>{1024, 2048, 4096});
  CHECK(sc.steps[0].args().more().bench.collective == Op::AllGather);
  CHECK_THAT(testing::load_error("steps:\n  - op: bench\n    collective: all_gathr\n    bytes: [1K]\n"),
             Catch::Contains("did you mean 'all_gather'"));
  CHECK_THAT(testing::load_error("steps:\n  - op: bench\n    collective: all_gather\n    bytes: [1Q]\n"),
             Catch::StartsWith("t.yaml:4:13: bad size '1Q'"));
}

TEST_CASE("bus bandwidth factors", "[bench]") {
  CHECK(bus_factor(Op::AllReduce, 4) == Approx(1.5));
  CHECK(bus_factor(Op::AllGather, 4) == Approx(0.75));
  CHECK(bus_factor(Op::ReduceScatter, 8) == Approx(0.875));
  CHECK(bus_factor(Op::Broadcast, 8) == 1);
  CHECK(bus_factor(Op::SendRecv, 2) == 1);
}

TEST_CASE("counts round to the ranks for split collectives", "[bench]") {
  auto s = bench_size(Op::AllGather, 1000, 4, 3);
  CHECK(s.count == 249);
  CHECK(s.bytes == 996);
  s = bench_size(Op::AllReduce, 1000, 4, 3);
  CHECK(s.count == 250);
  CHECK(bench_size(Op::AllToAll, 32, 4, 8).count == 8);
  // Below one element per rank: nothing, as nccl-tests sizes it (not rounded up).
  CHECK(bench_size(Op::AllToAll, 4, 4, 8).count == 0);
  CHECK(bench_size(Op::AllReduce, 2, 4, 8).count == 0);
}
