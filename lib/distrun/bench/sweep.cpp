#include "distrun/bench/sweep.hpp"

#include <algorithm>

#include "distrun/bench/report.hpp"

namespace distrun::bench {

void run_sweep(Backend& b, const BenchConfig& cfg, const std::vector<int64_t>& sizes,
               const std::vector<RankInfo>& ranks, const SweepOutput& output, SweepTotals& totals) {
  auto emit = [&](const std::string& line) {
    totals.lines.push_back(line);
    if (output.out) *output.out << line << std::endl;
  };
  if (output.column_header)
    for (const auto& l : column_header()) emit(l);
  BenchConfig config = cfg;
  for (const auto& r : ranks) {
    const auto same = [&](const RankInfo& o) { return o.host == r.host && o.address == r.address; };
    config.host_of_rank.push_back(int(std::find_if(ranks.begin(), ranks.end(), same) - ranks.begin()));
  }
  for (int64_t requested : sizes) {
    if (output.max_bytes > 0 && requested > output.max_bytes) {
      emit("# skipped " + std::to_string(requested) + " B: above the cap of " + std::to_string(output.max_bytes) +
           " B");
      continue;
    }
    const SizeResult size = run_size(b, config, requested);
    emit(table_row(size, cfg));
    if (output.verbose)
      for (const auto& l : stats_lines(size, ranks)) emit(l);
    for (const auto& p : size.placement) {
      if (!p.measured) continue;
      totals.busbw_sum += p.busbw_gbps;
      ++totals.busbw_count;
      totals.wrong += p.wrong;
    }
    for (auto& r : size_records(size, cfg, ranks)) totals.records.push_back(std::move(r));
    totals.rows.push_back(size_row(size, cfg, ranks));
  }
}

}  // namespace distrun::bench
