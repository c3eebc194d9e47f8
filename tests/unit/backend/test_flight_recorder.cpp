// The flight recorder: the ring, the shared file another process reads, and the analysis that
// names the first rank out of step.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>

#include "distrun/backend/flight_recorder.hpp"
#include "distrun/backend/recording_backend.hpp"
#include "distrun/core/error.hpp"
#include "ranks.hpp"

using namespace distrun;

namespace {

FlightEntry entry(uint64_t seq, const char* op, const char* group = "world", FlightState st = FlightState::Completed) {
  FlightEntry e;
  e.seq = seq;
  e.op = op;
  e.group = group;
  e.state = st;
  return e;
}

RankFlight rank_with(int r, std::vector<FlightEntry> es) {
  RankFlight f;
  f.rank = r;
  f.entries = std::move(es);
  return f;
}

}  // namespace

TEST_CASE("flight analysis: the rank in another collective is named") {
  std::vector<RankFlight> ranks;
  for (int r = 0; r < 4; ++r)
    ranks.push_back(rank_with(r, {entry(16, "all_reduce"),
                                  entry(17, r == 3 ? "all_gather" : "all_reduce", "world", FlightState::Started)}));
  CHECK(first_mismatch(ranks) == "rank 3 in all_gather #17 while the others are in all_reduce #17");
  CHECK(any_unfinished(ranks));
  std::string table = describe_flights(ranks);
  CHECK_THAT(table, Catch::Contains("rank 3: all_gather #17 (world"));
  CHECK_THAT(table, Catch::Contains("never finished"));
}

TEST_CASE("flight analysis: a rank that never entered is named, rings that wrapped are not blamed") {
  std::vector<RankFlight> ranks = {rank_with(0, {entry(8, "barrier"), entry(9, "all_reduce")}),
                                   rank_with(1, {entry(9, "all_reduce")}),  // its ring lost #8: not a mismatch
                                   rank_with(2, {entry(7, "broadcast"), entry(8, "barrier")}),
                                   rank_with(3, {entry(8, "barrier"), entry(9, "all_reduce")})};
  CHECK(first_mismatch(ranks) == "rank 2 never entered all_reduce #9 (ranks 0, 1, 3 did)");
}

TEST_CASE("flight analysis: subgroups are compared among their members; agreement is silent") {
  std::vector<RankFlight> ranks = {rank_with(0, {entry(1, "barrier"), entry(1, "all_reduce", "g1")}),
                                   rank_with(1, {entry(1, "barrier"), entry(1, "all_reduce", "g1")}),
                                   rank_with(2, {entry(1, "barrier")})};
  CHECK(first_mismatch(ranks).empty());
  CHECK_FALSE(any_unfinished(ranks));
  ranks[1].entries.push_back(entry(2, "broadcast", "g1", FlightState::Started));
  ranks[0].entries.push_back(entry(2, "all_reduce", "g1", FlightState::Started));
  ranks[2].entries.push_back(entry(2, "all_reduce", "g1"));
  // Three members now: two in all_reduce, one in broadcast.
  CHECK(first_mismatch(ranks) ==
        "rank 1 in broadcast #2 of group g1 while the others are in all_reduce #2 of group g1");
}

TEST_CASE("flight recorder: a ring keeps the last N, and a file is read by another reader") {
  FlightFile file(2, 4);
  auto a = FlightRecorder::attach(file.path(), 1, 7, 8);
  {
    FlightOrigin where("job.yaml:12");
    for (uint64_t s = 1; s <= 6; ++s)
      a->finish(a->start("all_reduce", "world", s, 64, "float32"), FlightState::Completed);
  }
  a->start("all_gather", "world", 7, 32, "int64");
  auto seen = read_flight_file(file.path());
  REQUIRE(seen.size() == 1);  // region 0 was never attached
  CHECK(seen[0].rank == 7);
  REQUIRE(seen[0].entries.size() == 4);
  CHECK(seen[0].entries.front().seq == 4);
  CHECK(seen[0].entries[1].origin == "job.yaml:12");
  CHECK(seen[0].entries.back().op == "all_gather");
  CHECK(seen[0].entries.back().state == FlightState::Started);
  CHECK(seen[0].entries.back().origin.empty());
  CHECK(file.read().size() == 1);
  CHECK_THROWS_AS(FlightRecorder::attach(file.path(), 2, 0, 8), ConfigError);
  CHECK_THROWS_AS(FlightRecorder::attach("/proc/self/cmdline", 0, 0, 8), ConfigError);
}

TEST_CASE("RecordingBackend: every rank numbers the same collectives alike, groups included") {
  std::vector<std::shared_ptr<FlightRecorder>> recs(3);
  testing::run_ranks(3, [&](ProcessGroup& pg) {
    Tensor t = Tensor::empty({4}, DType::Float32);
    pg.backend().all_reduce(t, {});
    auto g = pg.backend().new_group({0, 2});
    if (g) g->barrier({});
    pg.backend().barrier({});
    RankFlight f = pg.flight_recorder().read();
    RANK_REQUIRE(f.rank == pg.rank());
    // init's barrier #1, all_reduce #2, then the group's barrier #1 (members), the world's #3.
    std::vector<std::string> got;
    for (auto& e : f.entries) got.push_back(e.op + "#" + std::to_string(e.seq) + "@" + e.group);
    std::vector<std::string> want = {"barrier#1@world", "all_reduce#2@world"};
    if (pg.rank() != 1) want.push_back("barrier#1@g1");
    want.push_back("barrier#3@world");
    RANK_REQUIRE_CTX(got == want, got.size());
    for (auto& e : f.entries) RANK_REQUIRE(e.state == FlightState::Completed);
  });
}

TEST_CASE("flight analysis: far-apart sequence numbers are compared without walking the gap") {
  // The fuzzer's case: a report (or a corrupted ring) with #1 and #2^64-1 once looped for ever.
  std::vector<RankFlight> ranks =
      {rank_with(0, {entry(1, "barrier"), entry(UINT64_MAX, "all_reduce", "world", FlightState::Started)}),
       rank_with(1, {entry(1, "barrier"), entry(UINT64_MAX, "all_gather", "world", FlightState::Started)}),
       rank_with(2, {entry(1, "barrier"), entry(UINT64_MAX, "all_reduce", "world", FlightState::Started)})};
  CHECK(first_mismatch(ranks) ==
        "rank 1 in all_gather #18446744073709551615 while the others are in all_reduce #18446744073709551615");
}

TEST_CASE("flight recorder: threads recording at once, while a reader reads, never mix records") {
  // Each thread records its own op with its own group and size: a record made of two writers'
  // fields, or a half-written one taken for whole, shows as a pair that does not belong together.
  FlightFile file(1, 8);
  auto rec = FlightRecorder::attach(file.path(), 0, 0, 2);
  const std::vector<std::pair<std::string, std::string>> kinds = {{"all_reduce", "ga"}, {"broadcast", "gb"}};
  std::atomic<bool> done{false};
  bool mixed = false;
  std::thread reader([&] {
    // Until the writers are done, and once after (however late this thread got a core).
    bool last = false;
    while (!last) {
      last = done.load();
      const std::vector<RankFlight> ranks = read_flight_file(file.path());
      for (const auto& e : ranks.at(0).entries) {
        const bool a = e.op == "all_reduce" && e.group == "ga" && e.bytes == 1;
        const bool b = e.op == "broadcast" && e.group == "gb" && e.bytes == 2;
        mixed = mixed || !(a || b);
      }
    }
  });
  // For a fifth of a second each: long enough that the two share the cores for a while on a
  // loaded machine.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  std::vector<std::thread> writers;
  for (int w = 0; w < 2; ++w)
    writers.emplace_back([&, w] {
      for (uint64_t s = 1; std::chrono::steady_clock::now() < until; ++s)
        rec->finish(rec->start(kinds[size_t(w)].first.c_str(), kinds[size_t(w)].second, s, w + 1, "uint8"),
                    FlightState::Completed);
    });
  for (auto& t : writers) t.join();
  done = true;
  reader.join();
  CHECK_FALSE(mixed);
  const RankFlight last = rec->read();
  REQUIRE(last.entries.size() == 8);
  for (const auto& e : last.entries) CHECK(e.state == FlightState::Completed);
}
