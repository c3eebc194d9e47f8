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
      got[size_t(r)] = exchange_unique_id(
          store, unique_id_key(0), r, 0, 128,
          [&] {
            ++made[size_t(r)];
            return id;
          },
          10s);
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < n; ++r) CHECK(got[size_t(r)] == id);
  CHECK(made == std::vector<int>{1, 0, 0, 0, 0, 0});  // only rank 0 creates an id
  CHECK(store.get(unique_id_key(0)) == id);
}

TEST_CASE("successive communicators use their own sequence-numbered keys", "[nccl]") {
  HashStore store;
  // Two communicators made one after the other over one store, by two ranks: each rank counts
  // 0, 1, ... on its own, and the counts agree.
  const int a0 = next_comm_sequence(store, 0), a1 = next_comm_sequence(store, 1);
  const int b1 = next_comm_sequence(store, 1), b0 = next_comm_sequence(store, 0);
  CHECK(a0 == 0);
  CHECK(a1 == 0);
  CHECK(b0 == 1);
  CHECK(b1 == 1);
  CHECK(unique_id_key(a0) != unique_id_key(b0));
  CHECK(unique_id_key(a0, "p2p/0-1") != unique_id_key(b0, "p2p/0-1"));
  const std::string a = fake_id(16, 1), b = fake_id(16, 2);
  exchange_unique_id(
      store, unique_id_key(a0), 0, 0, 16, [&] { return a; }, 1s);
  exchange_unique_id(
      store, unique_id_key(b0), 0, 0, 16, [&] { return b; }, 1s);
  CHECK(exchange_unique_id(
            store, unique_id_key(a1), 1, 0, 16, [] { return std::string(); }, 1s) == a);
  CHECK(exchange_unique_id(
            store, unique_id_key(b1), 1, 0, 16, [] { return std::string(); }, 1s) == b);
}

TEST_CASE("a pair communicator's id comes from its creator, not rank 0", "[nccl]") {
  HashStore store;
  const std::string id = fake_id(32, 3), key = unique_id_key(0, "p2p/2-3");
  std::string got;
  std::thread hi([&] {
    got = exchange_unique_id(
        store, key, 3, 2, 32, [] { return std::string(); }, 10s);
  });
  CHECK(exchange_unique_id(
            store, key, 2, 2, 32, [&] { return id; }, 1s) == id);
  hi.join();
  CHECK(got == id);
}

TEST_CASE("an id of the wrong size is refused on both sides", "[nccl]") {
  HashStore store;
  CHECK_THROWS_WITH(exchange_unique_id(
                        store, unique_id_key(0), 0, 0, 128, [] { return std::string(100, 'x'); }, 1s),
                    Contains("100 bytes, expected 128"));
  store.set(unique_id_key(3), std::string(64, 'y'));  // as written by a rank of another NCCL build
  CHECK_THROWS_WITH(exchange_unique_id(
                        store, unique_id_key(3), 2, 0, 128, [] { return std::string(); }, 1s),
                    Contains("64 bytes, expected 128") && Contains("nccl/uid/3"));
}

TEST_CASE("a missing rank 0 is a TimeoutError naming the key, not a hang", "[nccl]") {
  HashStore store;
  try {
    exchange_unique_id(
        store, unique_id_key(5), 1, 0, 128, [] { return std::string(); }, 50ms);
    FAIL("no timeout");
  } catch (const TimeoutError& e) {
    CHECK_THAT(e.what(), Contains("rank 1") && Contains("nccl/uid/5") && Contains("rank 0"));
  }
}
