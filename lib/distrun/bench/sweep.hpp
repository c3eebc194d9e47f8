// A sweep: one collective over every size, each table line printed as its size completes,
// and the records and totals a run of several sweeps (`all`, `-d all`) adds up.
#pragma once
#include <nlohmann/json.hpp>

#include <ostream>
#include <vector>

#include "distrun/bench/engine.hpp"

namespace distrun::bench {

struct SweepTotals {
  std::vector<nlohmann::ordered_json> records;  // one per size and measured placement
  std::vector<nlohmann::ordered_json> rows;     // one per size, nccl-tests' layout (-J, --csv)
  std::vector<std::string> lines;               // every line printed (rank 0's table)
  double busbw_sum = 0;
  int busbw_count = 0;
  int64_t wrong = 0;
  double avg_busbw() const { return busbw_count ? busbw_sum / busbw_count : 0; }
};

struct SweepOutput {
  std::ostream* out = nullptr;  // where lines go as they are made (rank 0), or nowhere
  bool verbose = false;         // -v: the statistics lines under each row
  int64_t max_bytes = 0;        // sizes above it are skipped with a note (0: none)
  bool column_header = true;    // print the column titles first (once per collective)
};

/// Runs `cfg` at each of `sizes` on `b` (every member calls it) and adds to `totals`.
void run_sweep(Backend& b, const BenchConfig& cfg, const std::vector<int64_t>& sizes,
               const std::vector<RankInfo>& ranks, const SweepOutput& output, SweepTotals& totals);

}  // namespace distrun::bench
