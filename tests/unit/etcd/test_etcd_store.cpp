// The etcd client and EtcdStore against a real etcd, whose client URL is in $DISTRUN_ETCD
// (tests/launcher/etcd_test.py starts one and runs these; alone, they are not registered).
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <thread>

#include "distrun/core/error.hpp"
#include "distrun/etcd/etcd_client.hpp"
#include "distrun/etcd/etcd_store.hpp"

using namespace distrun;
using namespace distrun::etcd;
using namespace std::chrono_literals;

namespace {

std::vector<std::string> endpoints() {
  const char* e = std::getenv("DISTRUN_ETCD");
  REQUIRE(e);
  return parse_endpoints(e);
}

// Keys of this run only: the same etcd may serve several runs.
std::string unique(const std::string& name) { return "test/" + std::to_string(::getpid()) + "/" + name; }

// Writes `k` after `delay` from a store of its own in another thread; an error (a login on a
// loaded host may take seconds) is kept in `error` for the test to check, not a terminate.
std::thread write_later(const std::string& k, std::chrono::milliseconds delay, std::string& error) {
  return std::thread([eps = endpoints(), k, delay, &error] {
    try {
      std::this_thread::sleep_for(delay);
      EtcdStore(eps, "secret", 30s).set(k, "there");
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
}

}  // namespace

TEST_CASE("base64 round-trips every byte") {
  std::string all;
  for (int c = 0; c < 256; ++c) all.push_back(char(c));
  for (size_t n : {0, 1, 2, 3, 4, 256}) CHECK(base64_decode(base64_encode(all.substr(0, n))) == all.substr(0, n));
  CHECK(base64_encode("foo") == "Zm9v");
  CHECK_THROWS_AS(base64_decode("abc"), StoreError);
}

TEST_CASE("client: put, get, create, compare_and_swap, remove") {
  Client c(endpoints(), 5s);
  const std::string k = unique("kv");
  CHECK_FALSE(c.get(k));
  c.put(k, std::string("a\0b", 3));
  auto kv = c.get(k);
  REQUIRE(kv);
  CHECK(kv->value == std::string("a\0b", 3));
  CHECK_FALSE(c.create(k, "x"));
  CHECK(c.compare_and_swap(k, kv->mod_revision, "second"));
  CHECK_FALSE(c.compare_and_swap(k, kv->mod_revision, "stale"));
  CHECK(c.get(k)->value == "second");
  CHECK(c.remove(k));
  CHECK_FALSE(c.remove(k));
  CHECK(c.create(k, "first"));
  CHECK_FALSE(c.local_address().empty());
}

TEST_CASE("client: a leased key goes with its revoked lease") {
  Client c(endpoints(), 5s);
  const std::string k = unique("leased");
  int64_t lease = c.grant(5);
  c.put(k, "v", lease);
  CHECK(c.keep_alive(lease));
  CHECK(c.get(k));
  c.revoke(lease);
  CHECK_FALSE(c.get(k));
  CHECK_FALSE(c.keep_alive(lease));
}

TEST_CASE("client: an endpoint that is down is skipped; all down is a TimeoutError") {
  auto eps = endpoints();
  eps.insert(eps.begin(), "127.0.0.1:1");  // nothing listens on port 1
  Client c(eps, 3s);
  c.put(unique("skip"), "v");
  CHECK(c.get(unique("skip"))->value == "v");
  Client none({"127.0.0.1:1"}, 300ms);
  CHECK_THROWS_AS(none.get("k"), TimeoutError);
  Client default_port({"127.0.0.1"}, 300ms);  // port 2379 (a test's etcd listens elsewhere)
  CHECK_THROWS_AS(default_port.get("k"), TimeoutError);
}

TEST_CASE("store: add from many threads loses no update") {
  const std::string k = unique("counter");
  // Four logins at once cost etcd four password hashes (bcrypt): on a loaded host that alone
  // takes seconds, hence the long timeout. A thread's error is reported, not a terminate.
  const auto endpoints_now = endpoints();
  std::vector<std::thread> threads;
  std::vector<std::string> errors(4);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      try {
        EtcdStore s(endpoints_now, "secret", 30s);
        for (int i = 0; i < 10; ++i) s.add(k, 1);
      } catch (const std::exception& e) {
        errors[size_t(t)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (const auto& e : errors) CHECK(e == std::string());
  EtcdStore s(endpoints_now, "secret", 30s);
  CHECK(s.add(k, 0) == 40);
}

TEST_CASE("store: wait, get and check") {
  EtcdStore s(endpoints(), "secret", 30s);
  const std::string k = unique("later");
  CHECK_FALSE(s.check({k}));
  CHECK_THROWS_AS(s.wait({k}, 100ms), TimeoutError);
  std::string written;
  std::thread writer = write_later(k, 200ms, written);
  CHECK(s.get(k) == "there");
  writer.join();
  CHECK(written == std::string());
  CHECK(s.check({k}));
  CHECK(s.remove(k));
}

TEST_CASE("store: a wait is told of the write by a watch, not by looking again and again") {
  EtcdStore s(endpoints(), "secret", 2s);
  const std::string k = unique("watched");
  std::string written;
  std::thread writer = write_later(k, 600ms, written);
  const int64_t before = s.requests();
  const auto start = std::chrono::steady_clock::now();
  s.wait({k}, 10s);
  const auto took = std::chrono::steady_clock::now() - start;
  const int64_t made = s.requests() - before;
  writer.join();
  CHECK(written == std::string());
  // A look, a watch held until the write, a look again: looking every 20 ms would be about 30.
  CHECK(made <= 5);
  // Woken by the write (0.6 s), not by the end of the watch (10 s).
  CHECK(took < 6s);
  CHECK(s.get(k) == "there");
  CHECK(s.remove(k));
}

TEST_CASE("store: a wait for any of several keys is told by one watch over them") {
  EtcdStore s(endpoints(), "secret", 2s);
  const std::string a = unique("any/a"), b = unique("any/b");
  CHECK_THROWS_AS(s.wait_any({b, a}, 100ms), TimeoutError);
  std::string written;
  std::thread writer = write_later(b, 600ms, written);
  const int64_t before = s.requests();
  const auto start = std::chrono::steady_clock::now();
  const size_t index = s.wait_any({a, b}, 10s);
  const auto took = std::chrono::steady_clock::now() - start;
  const int64_t made = s.requests() - before;
  writer.join();
  CHECK(written == std::string());
  CHECK(index == 1);
  // Both looked at, a watch held until the write, both again (a slow writer: a watch slice
  // more): looking every 10 ms would be about 120.
  CHECK(made <= 10);
  CHECK(took < 6s);
  CHECK(s.wait_any({a, b}, 100ms) == 1);  // there already
  CHECK(s.remove(b));
}

TEST_CASE("store: a value without the secret's tag is refused") {
  const std::string k = unique("forged");
  Client(endpoints(), 2s).put(k, "hello");  // written by a stranger
  EtcdStore s(endpoints(), "secret", 2s);
  CHECK_THROWS_AS(s.get(k), StoreError);
  CHECK_THROWS_AS(s.add(k, 1), StoreError);
  // Another job's secret, or a tagged value moved to another key: refused too.
  EtcdStore(endpoints(), "other", 2s).set(k, "theirs");
  CHECK_THROWS_AS(s.get(k), StoreError);
  s.set(k, "mine");
  Client raw(endpoints(), 2s);
  raw.put(unique("moved"), raw.get(k)->value);
  CHECK_THROWS_AS(s.get(unique("moved")), StoreError);
  CHECK(s.get(k) == "mine");
}

TEST_CASE("store: a claim lives while its store runs, and only one process gets a claim_if_absent") {
  const std::string k = unique("claimed"), only = unique("only");
  Client raw(endpoints(), 2s);
  {
    EtcdStore a(endpoints(), "secret", 2s, 2), b(endpoints(), "secret", 2s, 2);
    a.claim(k, "1");
    CHECK(a.claim_if_absent(only, "a"));
    CHECK_FALSE(b.claim_if_absent(only, "b"));
    std::this_thread::sleep_for(3s);  // past the lease's TTL: renewed meanwhile
    CHECK(raw.get(k));
    CHECK(b.get(only) == "a");
  }
  CHECK_FALSE(raw.get(k));  // revoked when the store went
  CHECK_FALSE(raw.get(only));
}

TEST_CASE("store: claims are made again under a new lease when the old one lapsed") {
  const std::string k = unique("reclaimed");
  Client raw(endpoints(), 2s);
  EtcdStore s(endpoints(), "secret", 2s, 2);
  s.claim(k, "1");
  const int64_t first = s.lease_id();
  raw.revoke(first);  // as if this process had been frozen past the lease's TTL
  CHECK_FALSE(raw.get(k));
  // The store's keep-alive sees the lapse within a beat; a loaded host may take seconds more.
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!raw.get(k) && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(50ms);
  CHECK(s.get(k) == "1");
  CHECK(s.lease_id() != first);
}

TEST_CASE("store: a key written or deleted under a prefix moves its count, told by one watch") {
  const std::string prefix = unique("members/");
  Client raw(endpoints(), 2s);
  raw.put(prefix + "1", "1");
  EtcdStore s(endpoints(), "secret", 2s);
  const int64_t first = s.changes_under(prefix);
  const auto moves = [&](int64_t from) {
    const auto deadline = std::chrono::steady_clock::now() + 30s;  // a loaded host
    while (s.changes_under(prefix) == from && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(10ms);
    return s.changes_under(prefix) != from;
  };
  // Outside the prefix (the key just past it included): no change.
  raw.put(unique("members0"), "1");
  raw.put(unique("other"), "1");
  std::this_thread::sleep_for(600ms);  // past two of the watch's slices
  CHECK(s.changes_under(prefix) == first);
  raw.remove(prefix + "1");
  CHECK(moves(first));
  // A claim that goes with its store's lease (revoked here; one that lapses is deleted alike).
  const int64_t second = s.changes_under(prefix);
  { EtcdStore(endpoints(), "secret", 2s, 2).claim(prefix + "2", "1"); }
  CHECK(moves(second));
  CHECK_FALSE(raw.get(prefix + "2"));
}

// Run by etcd_test.py's auth case only, against an etcd with authentication enabled, a user
// in $ETCDCTL_USER/$ETCDCTL_PASSWORD and tokens that expire after 1 s (--auth-token-ttl 1).
TEST_CASE("client: with authentication, a stranger is refused and an expired token renewed", "[auth]") {
  const Credentials user = Credentials::from_env();
  REQUIRE_FALSE(user.user.empty());
  const std::string k = unique("auth");
  CHECK_THROWS_WITH(Client(endpoints(), 2s, Credentials{}).get(k), Catch::Contains("ETCDCTL_USER"));
  CHECK_THROWS_WITH(Client(endpoints(), 2s, Credentials{user.user, user.password + "x"}).get(k),
                    Catch::Contains("as etcd user " + user.user));

  Client c(endpoints(), 5s, user);
  c.put(k, "v");
  CHECK(c.get(k)->value == "v");
  std::this_thread::sleep_for(2500ms);  // the token expires unused
  const int64_t before = c.requests();
  CHECK(c.get(k)->value == "v");
  CHECK(c.requests() - before == 3);  // refused, authenticated again, answered

  EtcdStore s(endpoints(), "secret", 5s);  // its clients take the user from the environment
  s.set(k, "sealed");
  CHECK(s.get(k) == "sealed");
}
