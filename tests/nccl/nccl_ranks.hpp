// Ranks as threads of one process, each with its own NcclBackend on device `rank`, meeting
// through one HashStore.
#pragma once
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "distrun/nccl/nccl_backend.hpp"
#include "distrun/store/hash_store.hpp"

namespace distrun::testing {

/// Runs fn(backend, rank) on `n` ranks as threads; rethrows the first failure here.
inline void run_nccl_ranks(int n, const std::function<void(NcclBackend&, int)>& fn,
                           std::chrono::milliseconds timeout = std::chrono::milliseconds(30000)) {
  auto store = std::make_shared<HashStore>();
  std::exception_ptr first;
  std::mutex mu;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        NcclBackendOptions o;
        o.timeout = timeout;
        o.device = r;
        NcclBackend backend(store, r, n, o);
        fn(backend, r);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!first) first = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace distrun::testing
