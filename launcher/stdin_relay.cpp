#include "stdin_relay.hpp"

#include <unistd.h>

#include <cerrno>
#include <utility>

namespace distrun::launcher {
namespace {

constexpr size_t kMaxPending = 1 << 16;  // stop reading stdin while the worker lags this much

// A terminal is read only by its foreground process group; anyone else would get SIGTTIN
// (or EIO). Not a terminal (a file, a pipe): always ours to read.
bool may_read_stdin() {
  if (!isatty(STDIN_FILENO)) return true;
  return tcgetpgrp(STDIN_FILENO) == getpgrp();
}

}  // namespace

StdinRelay::StdinRelay(int worker_fd) : worker_fd_(worker_fd) {}

StdinRelay::~StdinRelay() {
  if (worker_fd_ >= 0) close(worker_fd_);
}

StdinRelay::StdinRelay(StdinRelay&& o) noexcept
    : worker_fd_(std::exchange(o.worker_fd_, -1)), stdin_done_(o.stdin_done_), pending_(std::move(o.pending_)) {}

StdinRelay& StdinRelay::operator=(StdinRelay&& o) noexcept {
  if (this != &o) {
    if (worker_fd_ >= 0) close(worker_fd_);
    worker_fd_ = std::exchange(o.worker_fd_, -1);
    stdin_done_ = o.stdin_done_;
    pending_ = std::move(o.pending_);
  }
  return *this;
}

int StdinRelay::read_fd() const {
  if (worker_fd_ < 0 || stdin_done_ || pending_.size() >= kMaxPending || !may_read_stdin()) return -1;
  return STDIN_FILENO;
}

int StdinRelay::write_fd() const { return worker_fd_ >= 0 && !pending_.empty() ? worker_fd_ : -1; }

void StdinRelay::on_readable() {
  char buf[4096];
  ssize_t n = read(STDIN_FILENO, buf, sizeof buf);
  if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EIO)) return;  // EIO: moved to the background
  if (n <= 0) {
    stdin_done_ = true;
    if (pending_.empty()) finish();
    return;
  }
  pending_.append(buf, size_t(n));
  on_writable();
}

void StdinRelay::on_writable() {
  if (worker_fd_ < 0) return;
  while (!pending_.empty()) {
    ssize_t n = write(worker_fd_, pending_.data(), pending_.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) {  // EPIPE: the worker closed its stdin; what it did not take is dropped
      finish();
      return;
    }
    pending_.erase(0, size_t(n));
  }
  if (stdin_done_) finish();
}

void StdinRelay::finish() {
  stdin_done_ = true;
  pending_.clear();
  if (worker_fd_ >= 0) close(worker_fd_);
  worker_fd_ = -1;
}

}  // namespace distrun::launcher
