#include "distrun/bench/statistics.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace distrun::bench {

double percentile(const std::vector<double>& sorted, double q) {
  const double pos = q / 100.0 * double(sorted.size() - 1);
  const size_t lo = size_t(std::floor(pos));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - double(lo));
}

Summary summarize(std::vector<double> samples) {
  Summary s;
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  s.samples = int(samples.size());
  s.min = samples.front();
  s.max = samples.back();
  s.p50 = percentile(samples, 50);
  s.p90 = percentile(samples, 90);
  s.p99 = percentile(samples, 99);
  s.mean = std::accumulate(samples.begin(), samples.end(), 0.0) / double(samples.size());
  double var = 0;
  for (double x : samples) var += (x - s.mean) * (x - s.mean);
  var /= double(samples.size());
  s.cv = s.mean > 0 ? std::sqrt(var) / s.mean : 0;
  return s;
}

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return percentile(values, 50);
}

}  // namespace distrun::bench
