// Summaries of timing samples: the percentiles and spread distrun-bench reports per size.
#pragma once
#include <vector>

namespace distrun::bench {

struct Summary {
  int samples = 0;
  double min = 0, p50 = 0, p90 = 0, p99 = 0, max = 0, mean = 0;
  double cv = 0;  // coefficient of variation: standard deviation / mean
};

/// Percentile `q` (0..100) of `sorted` (ascending, not empty), interpolated linearly between
/// the closest ranks as numpy's default does.
double percentile(const std::vector<double>& sorted, double q);

/// The summary of `samples` (all zero when empty).
Summary summarize(std::vector<double> samples);

/// The median of `values` (0 when empty).
double median(std::vector<double> values);

}  // namespace distrun::bench
