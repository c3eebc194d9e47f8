#include "distrun/nccl/watchdog.hpp"

#include <algorithm>

namespace distrun::nccl {

Watchdog::Watchdog(std::function<std::string()> check, std::function<void()> abort,
                   std::chrono::milliseconds check_every)
    : check_(std::move(check)), abort_(std::move(abort)), check_every_(check_every), thread_([this] { run(); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

int Watchdog::watch(Clock::time_point deadline) {
  std::lock_guard<std::mutex> lock(mu_);
  const int ticket = next_ticket_++;
  watches_[ticket] = {Clock::now(), deadline};
  cv_.notify_all();
  return ticket;
}

std::string Watchdog::done(int ticket) {
  std::lock_guard<std::mutex> lock(mu_);
  watches_.erase(ticket);
  return verdict_;
}

void Watchdog::run() {
  std::unique_lock<std::mutex> lock(mu_);
  Clock::time_point next_check = Clock::now() + check_every_;
  while (!stop_) {
    if (watches_.empty() || !verdict_.empty()) {
      cv_.wait(lock);  // nothing in flight (or already aborted): sleep until a wait begins
      continue;
    }
    auto first = std::min_element(watches_.begin(), watches_.end(),
                                  [](const auto& a, const auto& b) { return a.second.deadline < b.second.deadline; });
    // A copy: wait_until reads its time point again after waking, when done() may have erased
    // the watch it came from (std::min returns a reference into the map).
    const Clock::time_point until = std::min(first->second.deadline, next_check);
    cv_.wait_until(lock, until);
    // Woken by a watch that began or ended, or by the clock. Everything from here runs under the
    // lock, on the watches in flight now: a wait that ended meanwhile is never timed out (its
    // deadline is not carried over to the next operation), and done() cannot return between the
    // decision to abort and the abort.
    if (stop_ || watches_.empty()) continue;
    const auto now = Clock::now();
    std::string why;
    for (const auto& [ticket, w] : watches_)
      if (now >= w.deadline) {
        const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - w.started).count();
        why = "timed out after " + std::to_string(ms) + " ms";
      }
    if (why.empty() && now >= next_check) {
      why = check_();
      next_check = now + check_every_;
    }
    if (why.empty()) continue;
    verdict_ = why;
    abort_();  // the waiters wake when NCCL's kernels return
  }
}

}  // namespace distrun::nccl
