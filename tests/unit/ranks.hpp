// Ranks as threads: runs fn(backend) on `n` GlooBackends that meet through one HashStore.
#pragma once
#include <atomic>
#include <cmath>
#include <exception>
#include <sstream>
#include <stdexcept>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "distrun/comm/process_group.hpp"
#include "distrun/store/hash_store.hpp"

// Catch2's assertions are not thread-safe, so rank threads check with these instead: a failed
// check throws, and run_ranks rethrows the first failure on the test's own thread.
#define RANK_REQUIRE_CTX(cond, ctx)                                                 \
  do {                                                                              \
    ++distrun::testing::rank_checks;                                                \
    if (!(cond)) {                                                                  \
      std::ostringstream rank_require_msg_;                                         \
      rank_require_msg_ << __FILE__ << ":" << __LINE__ << ": check failed: " #cond; \
      rank_require_msg_ << " [" << ctx << "]";                                      \
      throw std::runtime_error(rank_require_msg_.str());                            \
    }                                                                               \
  } while (0)
#define RANK_REQUIRE(cond) RANK_REQUIRE_CTX(cond, "")

namespace distrun::testing {

/// Checks made by rank threads; run_ranks requires that a test made at least one.
inline std::atomic<long> rank_checks{0};

/// |a - b| within `rel` of |b| (or 1e-9 absolute near zero).
inline bool near(double a, double b, double rel = 1e-6) {
  return std::fabs(a - b) <= std::max(1e-9, rel * std::fabs(b));
}

/// Runs `fn` and returns the message of the E it throws; fails the rank when it throws nothing.
template <typename E, typename F>
std::string throws(F&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  throw std::runtime_error("expected an exception, none was thrown");
}

/// Runs `fn(pg)` as every rank of a world of `n` threads and rethrows the first failure.
inline void run_ranks(int n, const std::function<void(ProcessGroup&)>& fn,
                      std::chrono::milliseconds timeout = std::chrono::milliseconds(20000), bool heartbeats = false) {
  auto store = std::make_shared<HashStore>();
  std::vector<std::thread> threads;
  std::exception_ptr first;
  std::mutex mu;
  const long checks_before = rank_checks;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        WorldInfo w;
        w.rank = r;
        w.world_size = n;
        InitOptions o;
        o.world = w;
        o.store = store;
        o.timeout = timeout;
        o.heartbeats = heartbeats;
        auto pg = ProcessGroup::init(o);
        fn(*pg);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!first) first = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
  REQUIRE(rank_checks > checks_before);  // the ranks checked something, and all of it held
}

}  // namespace distrun::testing
