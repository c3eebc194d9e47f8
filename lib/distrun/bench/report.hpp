// What distrun-bench prints and writes: nccl-tests' table (header block, one line per size
// with the out-of-place and in-place columns, the average bus bandwidth), the compact
// statistics lines of -v, and the same results as JSON records and CSV rows.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "distrun/bench/engine.hpp"

namespace distrun::bench {

/// Where the bytes travel: the backend's transport ("shm", "tcp", "nccl"), or none for one rank.
std::string transport_of(Backend& b);

/// The provenance block of the JSON: distrun version, backend, transport, hosts, ranks per
/// host, the UTC date.
nlohmann::ordered_json provenance(Backend& b, const std::vector<RankInfo>& ranks);

/// "host (address)" of rank `r`.
std::string rank_place(const std::vector<RankInfo>& ranks, int r);

/// nccl-tests' opening block: the settings line and each rank's host, pid and device.
std::vector<std::string> header_block(const std::string& settings, const std::vector<RankInfo>& ranks);
/// The three column-title lines.
std::vector<std::string> column_header();
/// One table line for `size`.
std::string table_row(const SizeResult& size, const BenchConfig& cfg);
/// The -v lines under a row: percentiles, spread, first run and the slowest rank.
std::vector<std::string> stats_lines(const SizeResult& size, const std::vector<RankInfo>& ranks);
/// The closing lines: the wrong-element total and nccl-tests' "# Avg bus bandwidth", judged
/// OK or FAILED against `min_bw_gbps` when that is 0 or more (NCCL_TESTS_MIN_BW).
std::vector<std::string> footer(double avg_busbw_gbps, int64_t wrong, double min_bw_gbps = -1);
/// nccl-tests' NCCL_TESTS_MIN_BW gate: the average bus bandwidth below 90% of the minimum.
bool below_min_bw(double avg_busbw_gbps, double min_bw_gbps);

/// One flat record per measured placement of `size` (keys: collective, placement, bytes, ...,
/// p50_us, p99_us, slowest_rank, slowest_host, algbw_gbps, busbw_gbps): a scenario's rows.
std::vector<nlohmann::ordered_json> size_records(const SizeResult& size, const BenchConfig& cfg,
                                                 const std::vector<RankInfo>& ranks);

/// One -J row for `size` in nccl-tests' layout: size, count, type, redop, root, then
/// out_of_place and in_place (each time, alg_bw, bus_bw, nwrong, and distrun's statistics
/// beside them; null when not measured), actual_iterations, experiment_name; and collective.
nlohmann::ordered_json size_row(const SizeResult& size, const BenchConfig& cfg, const std::vector<RankInfo>& ranks);

/// The rows as CSV: a header line, then one line per measured placement of each row (the row's
/// keys, `placement`, the placement's keys; arrays left to the JSON).
std::vector<std::string> csv_lines(const std::vector<nlohmann::ordered_json>& rows);

/// nccl-tests' start_time and end_time: local time, "YYYY-MM-DD HH:MM:SS".
std::string local_time_now();

}  // namespace distrun::bench
