#include "distrun/scenario/model/limits.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>


namespace distrun::scenario {

std::optional<int64_t> parse_byte_size(const std::string& text) {
  if (text.empty()) return std::nullopt;
  size_t used = 0;
  double v;
  try {
    v = std::stod(text, &used);
  } catch (...) {
    return std::nullopt;
  }
  std::string suffix = text.substr(used);
  if (!suffix.empty() && (suffix.back() == 'B' || suffix.back() == 'b')) suffix.pop_back();
  double mult = 1;
  if (suffix == "K" || suffix == "k")
    mult = 1024.0;
  else if (suffix == "M" || suffix == "m")
    mult = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "g")
    mult = 1024.0 * 1024 * 1024;
  else if (!suffix.empty())
    return std::nullopt;
  const double bytes = v * mult;
  if (!(bytes >= 0) || bytes > 9e18 || bytes != std::floor(bytes)) return std::nullopt;
  return int64_t(bytes);
}

int64_t max_scenario_bytes() {
  if (const char* forced = std::getenv("DISTRUN_SCENARIO_MAX_BYTES"))
    if (auto v = parse_byte_size(forced)) return *v;
  return kDefaultMaxScenarioBytes;
}

int64_t host_memory_bytes() {
  if (const char* forced = std::getenv("DISTRUN_HOST_MEMORY"))
    if (auto v = parse_byte_size(forced)) return *v;
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return INT64_MAX;  // unknown: only the int64 bound applies
  return int64_t(pages) * int64_t(page);
}

std::optional<int64_t> checked_bytes(const Shape& shape, DType dtype) {
  int64_t total = int64_t(dtype_size(dtype));
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(total, d, &total)) return std::nullopt;
  return total;
}

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024 && u < 6) bytes /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return buf;
}

std::optional<std::string> unrepresentable(double v, DType dtype) {
  if (is_integer(dtype)) {
    if (std::isnan(v) || std::isinf(v))
      return std::string(std::isnan(v) ? "nan" : "inf") + " cannot be stored in " + dtype_name(dtype);
    const auto [ilo, ihi] = integer_range(dtype);
    const double lo = double(ilo), hi = double(ihi);
    // hi of int64 rounds up to 2^63 as a double, which no longer fits: compare strictly there.
    // A fraction is dropped on the way in, as torch does, except into bool, where torch makes
    // any nonzero true: only 0 and 1 have one meaning there.
    const double whole = dtype == DType::Bool ? v : std::trunc(v);
    const bool above = dtype == DType::Int64 ? whole >= hi : whole > hi;
    if (whole < lo || above || (whole != lo && whole != hi && dtype == DType::Bool)) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.10g", v);
      return std::string(buf) + " is out of the range of " + dtype_name(dtype);
    }
    return std::nullopt;
  }
  if (!std::isfinite(v)) return std::nullopt;  // every floating type holds nan and inf
  Tensor one = Tensor::empty({1}, dtype);
  one.set(0, v);
  if (std::isinf(one.get(0))) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.10g", v);
    return std::string(buf) + " overflows " + dtype_name(dtype);
  }
  return std::nullopt;
}

std::optional<std::string> bad_timeout(double seconds) {
  if (!(seconds > 0)) return std::string("must be more than 0 seconds");
  if (!(seconds <= kMaxTimeoutSeconds))
    return "must be at most " + std::to_string(int64_t(kMaxTimeoutSeconds)) + " seconds (a year)";
  return std::nullopt;
}

std::optional<std::string> unrepresentable(int64_t v, DType dtype) {
  if (!is_integer(dtype)) return unrepresentable(double(v), dtype);
  const auto [lo, hi] = integer_range(dtype);
  if (v >= lo && v <= hi) return std::nullopt;
  return std::to_string(v) + " is out of the range of " + dtype_name(dtype);
}

}  // namespace distrun::scenario
