#include "failure_report.hpp"

#include <algorithm>
#include <ctime>

#include "signal_names.hpp"

namespace distrun::launcher {
namespace {

std::string iso_time(std::chrono::system_clock::time_point t) {
  std::time_t secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  localtime_r(&secs, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count() % 1000;
  char frac[8];
  std::snprintf(frac, sizeof frac, ".%03d", int(ms));
  return std::string(buf) + frac;
}

}  // namespace

std::string format_failure(const WorkerFailure& f, const std::string& host, const std::string& what) {
  std::string out = "worker failed: " + what + "\n";
  out += "  host       : " + host + "\n";
  out += "  rank       : " + std::to_string(f.rank) + " (local_rank " + std::to_string(f.local_rank) + ")\n";
  out += "  ended with : " + describe_wait_status(f.wait_status) + "\n";
  out += "  time       : " + iso_time(f.when) + "\n";
  if (f.stderr_tail.empty()) {
    out += "  stderr     : (empty)\n";
  } else {
    out += "  stderr (last " + std::to_string(f.stderr_tail.size()) + " lines):\n";
    for (auto& line : f.stderr_tail) out += "    " + line + "\n";
  }
  return out;
}

}  // namespace distrun::launcher
