// The flight recorder across nodes: a node's report survives the store within its size bound,
// malformed ones are MalformedMessage, and the whole job's table names the ranks of other
// nodes and the nodes that sent nothing.
#include <catch2/catch.hpp>

#include "flight_report.hpp"
#include "rendezvous_messages.hpp"

using namespace distrun;
using namespace distrun::launcher;

namespace {

FlightEntry entry(uint64_t seq, const char* op, FlightState st = FlightState::Completed, std::string origin = "") {
  FlightEntry e;
  e.seq = seq;
  e.op = op;
  e.group = "world";
  e.dtype = "float32";
  e.bytes = 1024;
  e.state = st;
  e.start_us = 1700000000000000 + int64_t(seq);
  e.origin = std::move(origin);
  return e;
}

RankFlight rank_with(int r, std::vector<FlightEntry> es) {
  RankFlight f;
  f.rank = r;
  f.world_size = 4;
  f.pid = 100 + r;
  f.entries = std::move(es);
  return f;
}

// Ranks 0..3, collectives #1..#5; rank 3 is in all_gather #5 while the others are in all_reduce.
std::vector<RankFlight> job() {
  std::vector<RankFlight> ranks;
  for (int r = 0; r < 4; ++r) {
    std::vector<FlightEntry> es;
    for (uint64_t s = 1; s < 5; ++s) es.push_back(entry(s, "all_reduce"));
    es.push_back(entry(5, r == 3 ? "all_gather" : "all_reduce", FlightState::Started, "job.yaml:7"));
    ranks.push_back(rank_with(r, es));
  }
  return ranks;
}

}  // namespace

TEST_CASE("a node's flight report survives the store", "[launcher][flight]") {
  auto ranks = job();
  FlightReport back = decode_flight_report(encode_flight_report({ranks[2], ranks[3]}));
  REQUIRE(back.ranks.size() == 2);
  CHECK(back.left_out == 0);
  CHECK(back.ranks[1].rank == 3);
  CHECK(back.ranks[1].pid == 103);
  REQUIRE(back.ranks[1].entries.size() == 5);
  const FlightEntry& e = back.ranks[1].entries.back();
  CHECK(e.op == "all_gather");
  CHECK(e.seq == 5);
  CHECK(e.state == FlightState::Started);
  CHECK(e.origin == "job.yaml:7");
  CHECK(e.bytes == 1024);
  CHECK(e.start_us == 1700000000000005);
}

TEST_CASE("a flight report keeps fewer collectives, then fewer ranks, to stay in its bound", "[launcher][flight]") {
  std::vector<RankFlight> many;
  for (int r = 0; r < 200; ++r) {
    std::vector<FlightEntry> es;
    for (uint64_t s = 1; s <= 64; ++s)
      es.push_back(entry(s, "all_reduce", FlightState::Completed, std::string(100, 'x')));
    many.push_back(rank_with(r, es));
  }
  std::string text = encode_flight_report(many);
  CHECK(text.size() <= kMaxFlightReport);
  FlightReport all = decode_flight_report(text);
  CHECK(all.ranks.size() == 200);
  CHECK(all.ranks[0].entries.size() < kFlightsPerRank);
  CHECK(all.ranks[0].entries.back().seq == 64);  // the last ones are kept
  std::string tiny = encode_flight_report(many, 2000);
  CHECK(tiny.size() <= 2000);
  FlightReport some = decode_flight_report(tiny);
  CHECK(some.ranks.size() + size_t(some.left_out) == 200);
  CHECK(some.left_out > 0);
}

TEST_CASE("malformed flight reports are MalformedMessage", "[launcher][flight]") {
  for (const char* bad :
       {"", "[]", "{}", "{\"v\":2,\"ranks\":[],\"left_out\":0}", "{\"v\":1,\"ranks\":{},\"left_out\":0}",
        "{\"v\":1,\"ranks\":[{\"rank\":-1,\"world\":1,\"pid\":1,\"e\":[]}],\"left_out\":0}",
        "{\"v\":1,\"ranks\":[{\"rank\":0,\"world\":1,\"pid\":1,\"e\":[[1]]}],\"left_out\":0}",
        "{\"v\":1,\"ranks\":[{\"rank\":0,\"world\":1,\"pid\":1,\"e\":[[1,\"a\",\"w\",\"f\",0,-1,9,0,0,\"\"]]}],\"left_"
        "out\":0}",
        "{\"v\":1,\"ranks\":[{\"rank\":0,\"world\":1,\"pid\":1,\"e\":[[-1,\"a\",\"w\",\"f\",0,-1,1,0,0,\"\"]]}],\"left_"
        "out\":0}",
        "{\"v\":1,\"ranks\":[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]],\"left_out\":0}",
        "{\"v\":1.5,\"ranks\":[],\"left_out\":0}"})
    CHECK_THROWS_AS(decode_flight_report(bad), MalformedMessage);
  CHECK(decode_flight_report("{\"v\":1,\"ranks\":[],\"left_out\":0}").ranks.empty());
}

TEST_CASE("the whole job's flight table: every node's ranks, and the nodes that sent none", "[launcher][flight]") {
  auto ranks = job();
  std::vector<NodeFlights> nodes = {{0, "h0", 0, 2, FlightReport{{ranks[0], ranks[1]}, 0}},
                                    {1, "h1", 2, 2, FlightReport{{ranks[2], ranks[3]}, 0}}};
  std::string table = describe_job_flights(nodes);
  for (int r = 0; r < 4; ++r) CHECK_THAT(table, Catch::Contains("  rank " + std::to_string(r) + ": "));
  CHECK_THAT(table, Catch::Contains("first mismatch: rank 3 in all_gather #5 while the others are in all_reduce #5"));
  CHECK_THAT(table, !Catch::Contains("no report"));

  nodes.push_back({2, "h2", 4, 3, std::nullopt});
  table = describe_job_flights(nodes);
  CHECK_THAT(table, Catch::Contains("  no report from node 2 (host h2, ranks 4 to 6)\n"));

  // A rank is taken only from the node it lives on.
  nodes[0].report->ranks.push_back(ranks[3]);
  nodes[1].report->ranks.pop_back();
  CHECK_THAT(describe_job_flights(nodes), !Catch::Contains("rank 3:"));

  // Nothing unfinished: nothing to explain.
  for (auto& n : nodes)
    if (n.report)
      for (auto& r : n.report->ranks) r.entries.back().state = FlightState::Completed;
  CHECK(describe_job_flights(nodes).empty());
}
