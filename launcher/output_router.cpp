#include "output_router.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>

#include "distrun/core/error.hpp"
#include "log_dir.hpp"

namespace distrun::launcher {
namespace {

// Writes all of `data` to fd; returns errno of a failed write, 0 when all went.
int write_all(int fd, std::string_view data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EIO;
    done += size_t(n);
  }
  return 0;
}

}  // namespace

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

OutputRouter::OutputRouter(OutputConfig config, int nproc, int rank_offset, RunLogDir* logs, int attempt)
    : config_(std::move(config)), rank_offset_(rank_offset), out_files_(nproc, -1), err_files_(nproc, -1),
      out_names_(nproc), err_names_(nproc), out_at_start_(nproc, 1), err_at_start_(nproc, 1) {
  if (!logs) return;
  try {
    // As torchrun: a file for each stream --redirects or --tee names, and no other.
    for (int r = 0; r < nproc; ++r) {
      std::string dir = logs->make_rank_dir(attempt, r);
      if (config_.redirects.covers(r, false) || config_.tee.covers(r, false)) {
        out_names_[r] = dir + "/stdout.log";
        out_files_[r] = logs->create_file(attempt, r, "stdout.log");
      }
      if (config_.redirects.covers(r, true) || config_.tee.covers(r, true)) {
        err_names_[r] = dir + "/stderr.log";
        err_files_[r] = logs->create_file(attempt, r, "stderr.log");
      }
    }
  } catch (...) {
    for (int fd : out_files_)
      if (fd >= 0) close(fd);
    for (int fd : err_files_)
      if (fd >= 0) close(fd);
    throw;
  }
}

OutputRouter::~OutputRouter() {
  for (int fd : out_files_)
    if (fd >= 0) close(fd);
  for (int fd : err_files_)
    if (fd >= 0) close(fd);
}

bool OutputRouter::on_console(int local_rank, bool is_err) const {
  if (!config_.console_ranks.empty() && !config_.console_ranks.count(local_rank)) return false;
  // A redirected stream shows on the console only when also tee'd, as torchrun.
  return !config_.redirects.covers(local_rank, is_err) || config_.tee.covers(local_rank, is_err);
}

void OutputRouter::to_log(int fd, const std::string& name, std::string_view bytes) {
  // Unbuffered: a crash of the launcher must not lose what the workers said.
  int e = write_all(fd, bytes);
  if (e && log_error_.empty()) {
    log_error_ = "cannot write " + name + ": " + strerror(e);
    std::cerr << "distrun: error: " << log_error_ << " (the run will exit non-zero)" << std::endl;
  }
}

void OutputRouter::write(int local_rank, bool is_err, std::string_view bytes) {
  if (local_rank < 0 || local_rank >= int(out_files_.size()) || bytes.empty()) return;
  if (int fd = (is_err ? err_files_ : out_files_)[local_rank]; fd >= 0)
    to_log(fd, (is_err ? err_names_ : out_names_)[local_rank], bytes);
  if (!on_console(local_rank, is_err)) return;
  int rank = rank_offset_ + local_rank;
  char& at_start = (is_err ? err_at_start_ : out_at_start_)[local_rank];
  // Rank 0's stdout carries the scenario's ordered results: it passes unprefixed.
  if (!config_.prefix || (!is_err && rank == 0)) {
    write_all(is_err ? STDERR_FILENO : STDOUT_FILENO, bytes);  // a closed console (EPIPE) does not stop the workers
    return;
  }
  const std::string prefix = "[rank" + std::to_string(rank) + "]:";
  std::string out;
  out.reserve(bytes.size() + prefix.size());
  for (char c : bytes) {
    // at_start: 1 after '\n' (or at first), 2 after '\r'; "\r\n" ends one line, not two.
    if (at_start && !(at_start == 2 && c == '\n')) out += prefix;
    out += c;
    at_start = c == '\n' ? 1 : c == '\r' ? 2 : 0;
  }
  write_all(is_err ? STDERR_FILENO : STDOUT_FILENO, out);
}

}  // namespace distrun::launcher
