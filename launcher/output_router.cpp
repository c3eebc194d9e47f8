#include "output_router.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "distrun/core/error.hpp"

namespace distrun::launcher {
namespace {

// Writes all of `data` to fd, ignoring a closed console (EPIPE): workers keep running.
void write_all(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += size_t(n);
  }
}

}  // namespace

void make_directories(const std::string& path) {
  for (size_t at = 1; at <= path.size(); ++at) {
    if (at != path.size() && path[at] != '/') continue;
    std::string prefix = path.substr(0, at);
    if (mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST)
      throw Error("cannot create log folder " + prefix + ": " + strerror(errno));
  }
}

std::set<int> parse_local_ranks_filter(const std::string& text) {
  std::set<int> ranks;
  size_t at = 0;
  while (!text.empty() && at <= text.size()) {
    size_t comma = text.find(',', at);
    std::string item = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos || item.size() > 9)
      throw ConfigError("--local-ranks-filter " + text + ": '" + item + "' is not a local rank (expected e.g. 0,2)");
    ranks.insert(std::stoi(item));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return ranks;
}

OutputRouter::OutputRouter(OutputConfig config, int nproc, int rank_offset)
    : config_(std::move(config)), rank_offset_(rank_offset), out_files_(nproc, nullptr), err_files_(nproc, nullptr) {
  if (config_.attempt_dir.empty()) return;
  for (int r = 0; r < nproc; ++r) {
    std::string dir = config_.attempt_dir + "/" + std::to_string(r);
    make_directories(dir);
    out_files_[r] = fopen((dir + "/stdout.log").c_str(), "we");
    err_files_[r] = fopen((dir + "/stderr.log").c_str(), "we");
    if (!out_files_[r] || !err_files_[r]) throw Error("cannot open log files in " + dir + ": " + strerror(errno));
  }
}

OutputRouter::~OutputRouter() {
  for (FILE* f : out_files_)
    if (f) fclose(f);
  for (FILE* f : err_files_)
    if (f) fclose(f);
}

bool OutputRouter::on_console(int local_rank, bool is_err) const {
  if (!config_.console_ranks.empty() && !config_.console_ranks.count(local_rank)) return false;
  // A redirected stream shows on the console only when also tee'd, as torchrun.
  return !config_.redirects.covers(local_rank, is_err) || config_.tee.covers(local_rank, is_err);
}

void OutputRouter::line(int local_rank, bool is_err, std::string_view text) {
  if (local_rank < 0 || local_rank >= int(out_files_.size())) return;
  if (FILE* f = (is_err ? err_files_ : out_files_)[local_rank]) {
    fwrite(text.data(), 1, text.size(), f);
    fflush(f);  // a crash of the launcher must not lose what the workers said
  }
  if (!on_console(local_rank, is_err)) return;
  int rank = rank_offset_ + local_rank;
  // Rank 0's stdout carries the scenario's ordered results: it passes unprefixed.
  std::string out;
  if (is_err || rank != 0) out = "[rank" + std::to_string(rank) + "]:";
  out.append(text.data(), text.size());
  write_all(is_err ? STDERR_FILENO : STDOUT_FILENO, out);
}

}  // namespace distrun::launcher
