// The NCCL unique-id rendezvous through a Store, with a fake id and ranks as threads.
#include <catch2/catch.hpp>

#include <random>
#include <thread>

#include "distrun/core/error.hpp"
#include "distrun/nccl/unique_id_exchange.hpp"
#include "distrun/store/hash_store.hpp"

using namespace distrun;
using namespace distrun::nccl;
using Catch::Matchers::Contains;

namespace {

std::string fake_id(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = char(gen() & 0xff);  // arbitrary bytes, NULs included
  return s;
}

}  // namespace

TEST_CASE("every rank receives rank 0's id, byte for byte", "[nccl]") {
  HashStore store;
  const int n = 6;
  const std::string id = fake_id(128, 7);
  std::vector<std::string> got(n);
  std::vector<int> made(n, 0);
  std::vector<std::thread> ranks;
  // Rank 0 starts last, so the others really wait for the key.
  for (int r = n - 1; r >= 0; --r)
    ranks.emplace_back([&, r] {
      got[size_t(r)] = exchange_unique_id(store, 0, r, 128, [&] { ++made[size_t(r)]; return id; }, 10s);
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < n; ++r) CHECK(got[size_t(r)] == id);
  CHECK(made == std::vector<int>{1, 0, 0, 0, 0, 0});  // only rank 0 creates an id
  CHECK(store.get(unique_id_key(0)) == id);
}

TEST_CASE("successive communicators use their own sequence-numbered keys", "[nccl]") {
  HashStore store;
  CHECK(unique_id_key(0) != unique_id_key(1));
  const std::string a = fake_id(16, 1), b = fake_id(16, 2);
  exchange_unique_id(store, 0, 0, 16, [&] { return a; }, 1s);
  exchange_unique_id(store, 1, 0, 16, [&] { return b; }, 1s);
  CHECK(exchange_unique_id(store, 0, 1, 16, [] { return std::string(); }, 1s) == a);
  CHECK(exchange_unique_id(store, 1, 1, 16, [] { return std::string(); }, 1s) == b);
}

TEST_CASE("an id of the wrong size is refused on both sides", "[nccl]") {
  HashStore store;
  CHECK_THROWS_WITH(exchange_unique_id(store, 0, 0, 128, [] { return std::string(100, 'x'); }, 1s),
                    Contains("100 bytes, expected 128"));
  store.set(unique_id_key(3), std::string(64, 'y'));  // as written by a rank of another NCCL build
  CHECK_THROWS_WITH(exchange_unique_id(store, 3, 2, 128, [] { return std::string(); }, 1s),
                    Contains("64 bytes, expected 128") && Contains("nccl/uid/3"));
}

TEST_CASE("a missing rank 0 is a TimeoutError naming the key, not a hang", "[nccl]") {
  HashStore store;
  try {
    exchange_unique_id(store, 5, 1, 128, [] { return std::string(); }, 50ms);
    FAIL("no timeout");
  } catch (const TimeoutError& e) {
    CHECK_THAT(e.what(), Contains("rank 1") && Contains("nccl/uid/5") && Contains("rank 0"));
  }
}
