// Bounds the host's waits on an NCCL communicator without polling after every operation.
//
// The waiting thread sleeps in cudaEventSynchronize on a blocking-sync event (the driver wakes
// it when the GPU reaches the event: no spinning, no sleep loop, no latency added to a fast
// collective). Meanwhile this watchdog, one thread per communicator started at its first long
// wait, sleeps on a condition variable until the earliest deadline of the waits in progress,
// looking at ncclCommGetAsyncError every `check_every` (as torch's watchdog does), and aborts
// the communicator when a deadline passes or NCCL reports an error: NCCL's kernels see the abort
// flag and return, the event completes, and the waiter wakes up to the verdict.
#pragma once
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace distrun::nccl {

class Watchdog {
 public:
  using Clock = std::chrono::steady_clock;
  /// `check` returns an error text when the communicator has failed ("" while it is fine);
  /// `abort` aborts it. Both run on the watchdog's thread, under its lock (watch() and done()
  /// wait for them), so they must not call watch() or done().
  Watchdog(std::function<std::string()> check, std::function<void()> abort,
           std::chrono::milliseconds check_every = std::chrono::milliseconds(100));
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  /// Starts watching a wait that must end by `deadline`; returns its ticket for done().
  int watch(Clock::time_point deadline);
  /// Ends the watch of `ticket`. "" when the watchdog did nothing; else why it aborted:
  /// "timed out after N ms" or NCCL's error text.
  std::string done(int ticket);

 private:
  void run();

  std::function<std::string()> check_;
  std::function<void()> abort_;
  std::chrono::milliseconds check_every_;
  std::mutex mu_;
  std::condition_variable cv_;
  struct Watch {
    Clock::time_point started, deadline;
  };
  std::map<int, Watch> watches_;
  std::string verdict_;  // set once, when the watchdog aborts; every later watch sees it
  int next_ticket_ = 0;
  bool stop_ = false;
  std::thread thread_;  // last: starts once everything above is ready
};

}  // namespace distrun::nccl
