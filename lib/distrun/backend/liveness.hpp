// Heartbeats through the store, so that a failed collective can name the peer that died or
// froze. Every rank bumps "hb/<rank>" a few times a second from its own thread (a SIGSTOPped or
// killed process stops bumping); after a failure, stalled() says whose counter stood still.
// The store itself lives in rank 0: when rank 0 freezes, every question to the store would
// wait for the store's own timeout, so the store's host is judged first, from whether our own
// heartbeats still get answers, without asking it anything.
#pragma once
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "distrun/store/store.hpp"

namespace distrun {

class Liveness {
 public:
  /// Starts heartbeating as `rank` of `size` through `store` (a connection of its own: the
  /// heartbeat must not queue behind a blocking wait).
  Liveness(std::shared_ptr<Store> store, int rank, int size,
           std::chrono::milliseconds interval = std::chrono::milliseconds(300));
  ~Liveness();

  /// Records that this rank saw a collective fail, so that peers probing after it exits do not
  /// count it as lost (it is a survivor that gave up, not the cause).
  void mark_failed();

  /// The global ranks among `candidates` whose heartbeat did not advance during a probe of
  /// about three intervals, except those that marked themselves failed. Throws StoreError when
  /// the store itself is gone.
  std::vector<int> stalled(const std::vector<int>& candidates);

  /// A sentence naming the lost peers for an error message, e.g. "lost peer rank 2 (no
  /// heartbeat for 0.9 s)", or "" when every candidate is alive. Never throws, and returns
  /// within about max(3 intervals, 1 s) + 3 intervals: a dead or frozen store is reported as
  /// the loss of rank `store_host` that hosts it.
  std::string describe_loss(const std::vector<int>& candidates, int store_host = 0);

  /// The first rank named by the last describe_loss(), or -1.
  int last_lost() const { return last_lost_; }
  /// True once describe_loss() found the store gone or frozen (asking it more would only wait).
  bool store_lost() const { return store_lost_; }

 private:
  void run();
  /// False when the store did not answer a heartbeat sent now within `within`.
  bool store_answers(std::chrono::milliseconds within);

  std::shared_ptr<Store> store_;
  int rank_;
  int size_;
  std::chrono::milliseconds interval_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool poke_ = false;                      // heartbeat now (a probe waits for its answer)
  uint64_t answered_ = 0;                  // heartbeats the store answered
  std::atomic<bool> store_failed_{false};  // a heartbeat failed: the connection or the store is gone
  std::atomic<int> last_lost_{-1};
  std::atomic<bool> store_lost_{false};
  std::thread thread_;
};

}  // namespace distrun
