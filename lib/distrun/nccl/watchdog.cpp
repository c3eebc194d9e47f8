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
  while (!stop_) {
    if (watches_.empty() || !verdict_.empty()) {
      cv_.wait(lock);  // nothing in flight (or already aborted): sleep until a wait begins
      continue;
    }
    auto first = std::min_element(watches_.begin(), watches_.end(),
                                   [](const auto& a, const auto& b) { return a.second.deadline < b.second.deadline; });
    const Watch w = first->second;
    cv_.wait_until(lock, std::min(w.deadline, Clock::now() + check_every_));
    if (stop_ || watches_.empty()) continue;
    std::string why;
    if (Clock::now() >= w.deadline) {
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - w.started).count();
      why = "timed out after " + std::to_string(ms) + " ms";
    } else {
      lock.unlock();
      why = check_();
      lock.lock();
    }
    if (why.empty()) continue;
    verdict_ = why;
    lock.unlock();
    abort_();  // the waiters wake when NCCL's kernels return
    lock.lock();
  }
}

}  // namespace distrun::nccl
