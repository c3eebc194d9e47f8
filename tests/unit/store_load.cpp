// Load test of the TCPStore server: CLIENTS connections (threads) do add/set/get for SECONDS;
// no update may be lost (the server's counter equals the sum of every client's own count) and
// every get must return what that client set.
// Usage: distrun-test-store-load CLIENTS SECONDS
#include <sys/resource.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "distrun/store/tcp_store.hpp"

int main(int argc, char** argv) {
  using namespace distrun;
  using Clock = std::chrono::steady_clock;
  const int clients = argc > 1 ? std::atoi(argv[1]) : 1000;
  const int seconds = argc > 2 ? std::atoi(argv[2]) : 10;
  // Two descriptors per client in this one process (the client's and the server's end).
  rlimit lim{};
  getrlimit(RLIMIT_NOFILE, &lim);
  lim.rlim_cur = lim.rlim_max;
  setrlimit(RLIMIT_NOFILE, &lim);
  if (lim.rlim_cur < rlim_t(2 * clients + 64)) {
    std::printf("SKIP: RLIMIT_NOFILE hard limit %lu is below the %d descriptors needed\n", lim.rlim_cur,
                2 * clients + 64);
    return 77;
  }
  TCPStoreServer server({"127.0.0.1", 0});
  std::atomic<int64_t> done{0}, mismatches{0}, errors{0};
  std::atomic<int> connected{0};
  const auto deadline = Clock::now() + std::chrono::seconds(seconds);
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c)
    threads.emplace_back([&, c] {
      try {
        TCPStoreOptions o;
        o.timeout = std::chrono::seconds(60);
        TCPStore s("127.0.0.1", server.port(), o);
        ++connected;
        const std::string key = "client/" + std::to_string(c);
        int64_t mine = 0;
        while (Clock::now() < deadline) {
          s.add("total", 1);
          ++mine;
          s.set(key, std::to_string(mine));
          if (s.get(key) != std::to_string(mine)) ++mismatches;
        }
        done += mine;
      } catch (const std::exception& e) {
        ++errors;
        std::fprintf(stderr, "client %d: %s\n", c, e.what());
      }
    });
  for (auto& t : threads) t.join();
  TCPStore check("127.0.0.1", server.port());
  const int64_t total = check.add("total", 0);
  std::printf(
      "%d clients connected, %ld updates counted by clients, %ld by the server, %ld mismatched gets, %ld errors\n",
      connected.load(), long(done.load()), long(total), long(mismatches.load()), long(errors.load()));
  return total == done && mismatches == 0 && errors == 0 && connected == clients ? 0 : 1;
}
