// The watchdog that bounds the NCCL backend's waits, with fake check/abort callbacks (no device).
#include <catch2/catch.hpp>

#include <atomic>
#include <thread>

#include "distrun/nccl/watchdog.hpp"

using distrun::nccl::Watchdog;
using Catch::Matchers::StartsWith;
using namespace std::chrono_literals;

TEST_CASE("a wait that ends in time is left alone", "[nccl]") {
  std::atomic<int> aborts{0};
  Watchdog w([] { return std::string(); }, [&] { ++aborts; }, 5ms);
  const int t = w.watch(Watchdog::Clock::now() + 10s);
  std::this_thread::sleep_for(30ms);  // several checks go by
  CHECK(w.done(t).empty());
  CHECK(aborts == 0);
}

TEST_CASE("a wait past its deadline is aborted, once, with a timeout verdict", "[nccl]") {
  std::atomic<int> aborts{0};
  Watchdog w([] { return std::string(); }, [&] { ++aborts; }, 1000ms);
  const int t = w.watch(Watchdog::Clock::now() + 20ms);
  const auto until = Watchdog::Clock::now() + 10s;
  while (aborts == 0 && Watchdog::Clock::now() < until) std::this_thread::sleep_for(1ms);
  CHECK_THAT(w.done(t), StartsWith("timed out after "));
  CHECK(aborts == 1);
  // A later wait on the aborted communicator sees the same verdict.
  CHECK_THAT(w.done(w.watch(Watchdog::Clock::now() + 10s)), StartsWith("timed out"));
  CHECK(aborts == 1);
}

TEST_CASE("an NCCL error aborts long before the deadline", "[nccl]") {
  std::atomic<int> aborts{0};
  std::atomic<bool> broken{false};
  Watchdog w([&] { return broken ? std::string("remote process exited") : std::string(); }, [&] { ++aborts; }, 5ms);
  const int t = w.watch(Watchdog::Clock::now() + 60s);
  broken = true;
  const auto until = Watchdog::Clock::now() + 10s;
  while (aborts == 0 && Watchdog::Clock::now() < until) std::this_thread::sleep_for(1ms);
  CHECK(w.done(t) == "remote process exited");
  CHECK(aborts == 1);
}
