#include "distrun/bench/report.hpp"

#include <cstdarg>
#include <cstdio>
#include <ctime>
#include <map>

#include "distrun/bench/vocabulary.hpp"
#include "distrun/config.hpp"

namespace distrun::bench {

namespace {

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

// The time now as `fmt` says, in UTC or local time.
std::string time_now(const char* fmt, bool utc) {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  if (utc)
    gmtime_r(&t, &tm);
  else
    localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, fmt, &tm);
  return buf;
}

std::string redop_of(const BenchConfig& cfg) { return cfg.collective->reduces ? reduce_op_name(cfg.op) : "none"; }
int root_of(const BenchConfig& cfg) { return cfg.collective->rooted ? cfg.root : -1; }

std::string placement_columns(const PlacementResult& p) {
  if (!p.measured) return format("  %8s  %7s  %7s  %6s", "N/A", "N/A", "N/A", "N/A");
  const std::string wrong = p.checked ? std::to_string(p.wrong) : "N/A";
  // Fewer decimals as the time grows, so the columns stay aligned.
  const int decimals = p.time_us < 1e4 ? 2 : p.time_us < 1e6 ? 1 : 0;
  return format("  %8.*f  %7.2f  %7.2f  %6s", decimals, p.time_us, p.algbw_gbps, p.busbw_gbps, wrong.c_str());
}

}  // namespace

std::string transport_of(Backend& b) {
  if (b.size() == 1) return "none (one rank)";
  return b.transport_name();
}

std::string rank_place(const std::vector<RankInfo>& ranks, int r) {
  if (r < 0 || size_t(r) >= ranks.size()) return "?";
  const RankInfo& k = ranks[size_t(r)];
  return k.address.empty() ? k.host : k.host + " (" + k.address + ")";
}

nlohmann::ordered_json provenance(Backend& b, const std::vector<RankInfo>& ranks) {
  nlohmann::ordered_json p;
  p["distrun_version"] = DISTRUN_VERSION;
  p["backend"] = b.name();
  p["transport"] = transport_of(b);
  p["world_size"] = b.size();
  // A host is a name and an address: network-namespace hosts share one name.
  std::map<std::pair<std::string, std::string>, int> per_host;
  nlohmann::ordered_json hosts = nlohmann::ordered_json::array(), list = nlohmann::ordered_json::array();
  for (const auto& r : ranks) {
    if (per_host[{r.host, r.address}]++ == 0) hosts.push_back({{"host", r.host}, {"address", r.address}});
    list.push_back({{"rank", r.rank}, {"host", r.host}, {"address", r.address}, {"pid", r.pid}, {"device", r.device}});
  }
  for (auto& h : hosts) h["ranks"] = per_host[{h["host"].get<std::string>(), h["address"].get<std::string>()}];
  p["hosts"] = hosts;
  p["ranks"] = list;
  p["date"] = time_now("%Y-%m-%dT%H:%M:%SZ", true);
  return p;
}

std::vector<std::string> header_block(const std::string& settings, const std::vector<RankInfo>& ranks) {
  std::vector<std::string> lines{"# " + settings, "#", "# Using devices"};
  for (const auto& r : ranks)
    lines.push_back(format("#  Rank %2d Group  0 Pid %6d on %10s device %s", r.rank, r.pid,
                           (r.address.empty() ? r.host : r.host + " [" + r.address + "]").c_str(), r.device.c_str()));
  lines.push_back("#");
  return lines;
}

std::vector<std::string> column_header() {
  return {
      format("# %10s  %12s  %8s  %6s  %6s  %s", "", "", "", "", "",
             "          out-of-place                          in-place"),
      format("# %10s  %12s  %8s  %6s  %6s  %8s  %7s  %7s  %6s  %8s  %7s  %7s  %6s", "size", "count", "type", "redop",
             "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong"),
      format("# %10s  %12s  %8s  %6s  %6s  %8s  %7s  %7s  %6s  %8s  %7s  %7s  %6s", "(B)", "(elements)", "", "", "",
             "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", ""),
  };
}

std::string table_row(const SizeResult& size, const BenchConfig& cfg) {
  return format("%12lld  %12lld  %8s  %6s  %6d", static_cast<long long>(size.bytes),
                static_cast<long long>(size.count_per_rank), type_name(cfg.dtype), redop_of(cfg).c_str(),
                root_of(cfg)) +
         placement_columns(size.placement[0]) + placement_columns(size.placement[1]);
}

std::vector<std::string> stats_lines(const SizeResult& size, const std::vector<RankInfo>& ranks) {
  std::vector<std::string> lines;
  for (Placement p : {Placement::OutOfPlace, Placement::InPlace}) {
    const PlacementResult& r = size.placement[int(p)];
    if (!r.measured) continue;
    const Summary& s = r.stats;
    lines.push_back(
        format("#   %-12s us: min %.2f p50 %.2f p90 %.2f p99 %.2f max %.2f mean %.2f cv %.3f first %.2f"
               " | slowest rank %d on %s: kept the others waiting %.2f us on average, waited least in %.0f%%",
               placement_name(p), s.min, s.p50, s.p90, s.p99, s.max, s.mean, s.cv, r.first_us, r.slowest_rank,
               rank_place(ranks, r.slowest_rank).c_str(), r.slowest_late_us, 100 * r.slowest_share));
  }
  return lines;
}

bool below_min_bw(double avg_busbw_gbps, double min_bw_gbps) {
  return min_bw_gbps >= 0 && avg_busbw_gbps < 0.9 * min_bw_gbps;
}

std::vector<std::string> footer(double avg_busbw_gbps, int64_t wrong, double min_bw_gbps) {
  const char* verdict = min_bw_gbps < 0 ? "" : below_min_bw(avg_busbw_gbps, min_bw_gbps) ? " FAILED" : " OK";
  return {format("# Wrong elements       : %lld %s", static_cast<long long>(wrong), wrong ? "FAILED" : "OK"),
          format("# Avg bus bandwidth    : %.4f%s", avg_busbw_gbps, verdict), "#"};
}

namespace {

// distrun's statistics of one placement beside the figures: the percentiles over the iterations
// (each the slowest rank's time, as nccl-tests' -I), the slowest rank by arrival, and with
// --raw-samples every rank's times and arrivals.
void add_statistics(nlohmann::ordered_json& j, const PlacementResult& r, const BenchConfig& cfg,
                    const std::vector<RankInfo>& ranks) {
  j["min_us"] = r.stats.min;
  j["p50_us"] = r.stats.p50;
  j["p90_us"] = r.stats.p90;
  j["p99_us"] = r.stats.p99;
  j["max_us"] = r.stats.max;
  j["mean_us"] = r.stats.mean;
  j["cv"] = r.stats.cv;
  j["first_us"] = r.first_us;
  j["samples"] = r.stats.samples;
  j["slowest_rank"] = r.slowest_rank;
  j["slowest_host"] = size_t(r.slowest_rank) < ranks.size() ? ranks[size_t(r.slowest_rank)].host : "";
  j["slowest_address"] = size_t(r.slowest_rank) < ranks.size() ? ranks[size_t(r.slowest_rank)].address : "";
  j["slowest_share"] = r.slowest_share;
  j["slowest_late_us"] = r.slowest_late_us;
  if (cfg.raw_samples) {
    j["rank_times_us"] = r.raw_us;
    j["rank_arrivals_us"] = r.raw_arrival_us;
  }
}

nlohmann::ordered_json wrong_of(const PlacementResult& r) {
  return r.checked ? nlohmann::ordered_json(r.wrong) : nlohmann::ordered_json(nullptr);
}

}  // namespace

std::vector<nlohmann::ordered_json> size_records(const SizeResult& size, const BenchConfig& cfg,
                                                 const std::vector<RankInfo>& ranks) {
  std::vector<nlohmann::ordered_json> out;
  for (Placement p : {Placement::OutOfPlace, Placement::InPlace}) {
    const PlacementResult& r = size.placement[int(p)];
    if (!r.measured) continue;
    nlohmann::ordered_json j;
    j["collective"] = cfg.collective->name;
    j["placement"] = placement_name(p);
    j["bytes"] = size.bytes;
    j["count"] = size.count_per_rank;
    j["dtype"] = type_name(cfg.dtype);
    j["redop"] = redop_of(cfg);
    j["root"] = root_of(cfg);
    j["iters"] = cfg.iters;
    j["agg"] = cfg.agg;
    j["time_us"] = r.time_us;
    j["algbw_gbps"] = r.algbw_gbps;
    j["busbw_gbps"] = r.busbw_gbps;
    j["wrong"] = wrong_of(r);
    add_statistics(j, r, cfg, ranks);
    out.push_back(std::move(j));
  }
  return out;
}

nlohmann::ordered_json size_row(const SizeResult& size, const BenchConfig& cfg, const std::vector<RankInfo>& ranks) {
  nlohmann::ordered_json row;
  row["size"] = size.bytes;
  row["count"] = size.count_per_rank;
  row["type"] = type_name(cfg.dtype);
  row["redop"] = redop_of(cfg);
  row["root"] = root_of(cfg);
  for (Placement p : {Placement::OutOfPlace, Placement::InPlace}) {
    const PlacementResult& r = size.placement[int(p)];
    nlohmann::ordered_json j;  // null: not measured (nccl-tests writes null too)
    if (r.measured) {
      j["time"] = r.time_us;
      j["alg_bw"] = r.algbw_gbps;
      j["bus_bw"] = r.busbw_gbps;
      j["nwrong"] = wrong_of(r);
      add_statistics(j, r, cfg, ranks);
    }
    row[placement_name(p)] = j;
  }
  row["actual_iterations"] = cfg.iters;
  row["experiment_name"] = "";
  row["collective"] = cfg.collective->name;
  return row;
}

std::vector<std::string> csv_lines(const std::vector<nlohmann::ordered_json>& rows) {
  // One value per field: arrays (rank_times_us) stay in the JSON.
  auto flat = [](const nlohmann::ordered_json& v) { return !v.is_array() && !v.is_object(); };
  std::vector<std::string> lines;
  for (const auto& row : rows)
    for (Placement p : {Placement::OutOfPlace, Placement::InPlace}) {
      const auto& figures = row.at(placement_name(p));
      if (!figures.is_object()) continue;
      std::vector<std::pair<std::string, nlohmann::ordered_json>> fields;
      for (const auto& [k, v] : row.items())
        if (k != placement_name(Placement::OutOfPlace) && k != placement_name(Placement::InPlace))
          fields.emplace_back(k, v);
      fields.emplace_back("placement", placement_name(p));
      for (const auto& [k, v] : figures.items()) fields.emplace_back(k, v);
      std::string head, line;
      bool first = true;
      for (const auto& [k, v] : fields) {
        if (!flat(v)) continue;
        head += (first ? "" : ",") + k;
        line += (first ? "" : ",") + (v.is_null() ? "" : v.dump());  // null: an empty field
        first = false;
      }
      if (lines.empty()) lines.push_back(head);
      lines.push_back(line);
    }
  return lines;
}

std::string local_time_now() { return time_now("%Y-%m-%d %H:%M:%S", false); }

}  // namespace distrun::bench
