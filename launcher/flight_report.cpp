#include "flight_report.hpp"

#include <algorithm>
#include <limits>
#include <set>
#include <nlohmann/json.hpp>

#include "rendezvous_messages.hpp"

namespace distrun::launcher {
namespace {

using nlohmann::json;

constexpr int kVersion = 1;
constexpr size_t kMaxRanks = 1 << 16;
constexpr size_t kMaxText = 256;  // any one string (the recorder's own fields are shorter)
constexpr int kMaxDepth = 5;      // {"ranks": [{"e": [[1, ...]]}]}: the entry's values are at depth 5

// The last `keep` collectives of a rank (or its last operation when it made no collective:
// that is what the table shows for it).
std::vector<const FlightEntry*> kept(const RankFlight& r, size_t keep) {
  std::vector<const FlightEntry*> out;
  for (auto it = r.entries.rbegin(); it != r.entries.rend() && out.size() < keep; ++it)
    if (it->peer < 0) out.push_back(&*it);
  if (out.empty() && !r.entries.empty()) out.push_back(&r.entries.back());
  std::reverse(out.begin(), out.end());
  return out;
}

json encode_rank(const RankFlight& r, size_t keep) {
  json entries = json::array();
  for (const FlightEntry* e : kept(r, keep))
    entries.push_back(
        {e->seq, e->op, e->group, e->dtype, e->bytes, e->peer, int(e->state), e->start_us, e->end_us, e->origin});
  return {{"rank", r.rank}, {"world", r.world_size}, {"pid", r.pid}, {"e", entries}};
}

[[noreturn]] void malformed(const std::string& why) {
  throw MalformedMessage("rendezvous: malformed flight report (" + why + ")");
}

int64_t integer(const json& j, int64_t lo, int64_t hi, const char* what) {
  if (!j.is_number_integer()) malformed(std::string(what) + " is not an integer");
  if (j.is_number_unsigned() && j.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    malformed(std::string(what) + " out of range");
  int64_t v = j.get<int64_t>();
  if (v < lo || v > hi) malformed(std::string(what) + " out of range");
  return v;
}

std::string text(const json& j, const char* what) {
  if (!j.is_string() || j.get_ref<const std::string&>().size() > kMaxText)
    malformed(std::string(what) + " is not a short string");
  return j.get<std::string>();
}

const json& member(const json& o, const char* name) {
  auto it = o.find(name);
  if (it == o.end()) malformed(std::string("no ") + name);
  return *it;
}

FlightEntry decode_entry(const json& a) {
  if (!a.is_array() || a.size() != 10) malformed("an entry is not an array of 10");
  FlightEntry e;
  if (!a[0].is_number_unsigned()) malformed("seq is not an unsigned integer");
  e.seq = a[0].get<uint64_t>();
  e.op = text(a[1], "op");
  e.group = text(a[2], "group");
  e.dtype = text(a[3], "dtype");
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  e.bytes = integer(a[4], 0, kMax, "bytes");
  e.peer = int(integer(a[5], -1, kMaxWorld, "peer"));
  e.state = FlightState(integer(a[6], int64_t(FlightState::Started), int64_t(FlightState::Failed), "state"));
  e.start_us = integer(a[7], 0, kMax, "start");
  e.end_us = integer(a[8], 0, kMax, "end");
  e.origin = text(a[9], "origin");
  return e;
}

std::string rank_range(int first, int count) {
  if (count == 1) return "rank " + std::to_string(first);
  return "ranks " + std::to_string(first) + " to " + std::to_string(first + count - 1);
}

}  // namespace

std::string encode_flight_report(const std::vector<RankFlight>& ranks, size_t max_bytes) {
  // Fewer collectives per rank first (the last one is what the table shows; a few before it
  // let the mismatch be found), then fewer ranks, saying how many were left out.
  std::string out;
  for (size_t keep = kFlightsPerRank;; keep /= 2) {
    json all = json::array();
    for (const auto& r : ranks) all.push_back(encode_rank(r, keep));
    out = json{{"v", kVersion}, {"ranks", all}, {"left_out", 0}}.dump();
    if (out.size() <= max_bytes || keep == 1) break;
  }
  if (out.size() <= max_bytes) return out;
  // The ranks that fit, in one pass: each rank's text plus a comma, after the envelope (whose
  // "left_out" count is given room for its largest value).
  const size_t envelope = json{{"v", kVersion}, {"ranks", json::array()}, {"left_out", ranks.size()}}.dump().size();
  json all = json::array();
  size_t used = envelope;
  for (const auto& r : ranks) {
    json one = encode_rank(r, 1);
    const size_t len = one.dump().size() + 1;
    if (used + len > max_bytes) break;
    used += len;
    all.push_back(std::move(one));
  }
  const size_t left_out = ranks.size() - all.size();
  return json{{"v", kVersion}, {"ranks", all}, {"left_out", left_out}}.dump();
}

FlightReport decode_flight_report(const std::string& input) {
  if (input.size() > 2 * kMaxFlightReport) malformed("too long");
  // Nesting deeper than a report's is refused as it is read, never built.
  bool too_deep = false;
  json::parser_callback_t depth_guard = [&](int depth, json::parse_event_t, json&) {
    if (depth > kMaxDepth) too_deep = true;
    return !too_deep;
  };
  json j = json::parse(input, depth_guard, /*allow_exceptions=*/false);
  if (too_deep) malformed("nested too deep");
  if (!j.is_object()) malformed("not a JSON object");
  if (integer(member(j, "v"), 0, 1 << 20, "version") != kVersion) malformed("another version");
  FlightReport report;
  report.left_out = int(integer(member(j, "left_out"), 0, kMaxWorld, "left_out"));
  const json& ranks = member(j, "ranks");
  if (!ranks.is_array() || ranks.size() > kMaxRanks) malformed("ranks is not a list");
  for (const json& r : ranks) {
    if (!r.is_object()) malformed("a rank is not an object");
    RankFlight f;
    f.rank = int(integer(member(r, "rank"), 0, kMaxWorld - 1, "rank"));
    f.world_size = int(integer(member(r, "world"), 0, kMaxWorld, "world"));
    f.pid = int(integer(member(r, "pid"), 0, std::numeric_limits<int32_t>::max(), "pid"));
    const json& entries = member(r, "e");
    if (!entries.is_array() || entries.size() > FlightRecorder::kDefaultSlots) malformed("e is not a short list");
    for (const json& e : entries) f.entries.push_back(decode_entry(e));
    report.ranks.push_back(std::move(f));
  }
  return report;
}

std::string describe_job_flights(const std::vector<NodeFlights>& nodes) {
  std::vector<RankFlight> ranks;
  std::set<int> shown;
  std::vector<std::string> notes;
  for (const auto& n : nodes) {
    const std::string who =
        "node " + std::to_string(n.node) + " (host " + n.host + ", " + rank_range(n.first_rank, n.nproc) + ")";
    if (!n.report) {
      notes.push_back("no report from " + who);
      continue;
    }
    for (const auto& r : n.report->ranks)
      // A rank is shown once, and only where its node's share says it lives.
      if (r.rank >= n.first_rank && r.rank < n.first_rank + n.nproc && shown.insert(r.rank).second) ranks.push_back(r);
    if (n.report->left_out > 0)
      notes.push_back(std::to_string(n.report->left_out) + " rank(s) of " + who +
                      " left out of its report (size bound)");
  }
  if (!any_unfinished(ranks)) return "";
  return describe_flights(ranks, notes);
}

}  // namespace distrun::launcher
