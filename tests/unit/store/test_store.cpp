// HashStore, PrefixStore and TCPStore: semantics, timeouts, authentication, bounds.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <thread>

#include "distrun/core/error.hpp"
#include "distrun/store/hash_store.hpp"
#include "distrun/store/protocol.hpp"
#include "frame_relay.hpp"
#include "distrun/store/tcp_store.hpp"

using namespace distrun;
using namespace std::chrono_literals;

namespace {

// `other` sets a key from another thread while `s` waits (a TCPStore client serves one
// request at a time, so it must be a second connection there).
void exercise(Store& s, Store& other) {
  s.set("a", std::string("x\0y", 3));
  CHECK(s.get("a") == std::string("x\0y", 3));
  CHECK(s.add("n", 5) == 5);
  CHECK(s.add("n", -2) == 3);
  CHECK(s.get("n") == "3");
  CHECK(s.check({"a", "n"}));
  CHECK_FALSE(s.check({"a", "zz"}));
  CHECK(s.remove("a"));
  CHECK_FALSE(s.remove("a"));
  CHECK_THROWS_AS(s.wait({"never"}, 50ms), TimeoutError);
  std::thread later([&] {
    std::this_thread::sleep_for(30ms);
    other.set("late", "v");
  });
  s.wait({"late"}, 5s);
  later.join();
  CHECK(s.get("late") == "v");
  // A mark set with an add wakes its waiters as a set does; no mark when the add fails.
  int64_t count = 0;
  std::thread marked([&] {
    std::this_thread::sleep_for(30ms);
    count = other.add_marked("joined", 2, "joined/7", "here");
  });
  s.wait({"joined/7"}, 5s);
  marked.join();
  CHECK(count == 2);
  CHECK(s.get("joined/7") == "here");
  CHECK(s.add_marked("joined", 1, "joined/8", "") == 3);
  CHECK(s.check({"joined/8"}));
  CHECK_THROWS_AS(s.add_marked("late", 1, "joined/9", "x"), StoreError);
  CHECK_FALSE(s.check({"joined/9"}));
}

// wait_any and multi_get on `s`, with `other` writing meanwhile (as in exercise()).
void exercise_any(Store& s, Store& other) {
  s.set("one", "1");
  CHECK(s.wait_any({"none", "one"}, 5s) == 1);  // there already: no wait
  // A key removed is absent again: it does not finish a wait-any.
  s.set("gone", "x");
  s.remove("gone");
  CHECK_THROWS_WITH(s.wait_any({"gone", "never"}, 100ms),
                    Catch::Contains("any of") && Catch::Contains("gone'") && Catch::Contains("never'"));
  std::thread later([&] {
    std::this_thread::sleep_for(50ms);
    other.set("unrelated", "u");
    other.set("second", "2");
  });
  CHECK(s.wait_any({"first", "second", "second"}, 5s) == 1);
  later.join();

  s.set("bin", std::string("a\0b", 3));
  s.set("empty", "");
  auto values = s.multi_get({"bin", "absent", "empty", "bin"});
  REQUIRE(values.size() == 4);
  CHECK(values[0] == std::string("a\0b", 3));
  CHECK_FALSE(values[1].has_value());
  CHECK(values[2] == std::string());
  CHECK(values[3] == values[0]);
  s.remove("bin");
  CHECK_FALSE(s.multi_get({"bin"})[0].has_value());
  CHECK(s.multi_get({}).empty());
}

// Opens a raw TCP connection to 127.0.0.1:port.
int raw_connect(uint16_t port) {
  const int fd = distrun::test::connect_to("127.0.0.1", port);
  REQUIRE(fd >= 0);
  return fd;
}

// A server that holds a job secret, on loopback, and the options of its clients.
struct SecretStore {
  static TCPStoreServerOptions server_options() {
    TCPStoreServerOptions so;
    so.host = "127.0.0.1";
    so.secret = "s3cret";
    return so;
  }
  static TCPStoreOptions client_options() {
    TCPStoreOptions c;
    c.timeout = 5s;
    c.secret = "s3cret";
    return c;
  }
  TCPStoreServer server{server_options()};
  TCPStoreOptions client = client_options();
  uint16_t port() const { return server.port(); }
};

// A thread waiting for "go" on `s`, again each time its wait gives way (counted).
std::thread wait_for_go(TCPStore& s, std::atomic<int>& gave_way, std::atomic<size_t>& index) {
  return std::thread([s = &s, gave_way = &gave_way, index = &index] {
    for (;;) try {
        *index = s->wait_any({"go"}, 10s);
        return;
      } catch (const WaitGaveWay&) {
        ++*gave_way;
      }
  });
}

}  // namespace

TEST_CASE("HashStore semantics") {
  HashStore s;
  exercise(s, s);
}

TEST_CASE("HashStore: wait_any and multi_get") {
  HashStore s;
  exercise_any(s, s);
}

TEST_CASE("PrefixStore keeps namespaces apart") {
  auto inner = std::make_shared<HashStore>();
  PrefixStore a("a", inner), b("b", inner);
  a.set("k", "1");
  b.set("k", "2");
  CHECK(a.get("k") == "1");
  CHECK(b.get("k") == "2");
  CHECK(inner->get("a/k") == "1");
  exercise(a, a);
  exercise_any(a, a);
  CHECK_FALSE(b.multi_get({"one"})[0].has_value());
  CHECK(inner->multi_get({"a/one"})[0] == "1");
}

TEST_CASE("TCPStore semantics over a real socket") {
  TCPStoreOptions o;
  o.is_server = true;
  o.timeout = 5s;
  TCPStore server("127.0.0.1", 0, o);
  TCPStoreOptions c;
  c.timeout = 5s;
  TCPStore client("127.0.0.1", server.port(), c);
  exercise(server, client);
  client.set("from-client", "hello");
  CHECK(server.get("from-client") == "hello");
}

TEST_CASE("TCPStore: wait_any and multi_get over a real socket") {
  SecretStore f;
  TCPStore client("127.0.0.1", f.port(), f.client), other("127.0.0.1", f.port(), f.client);
  exercise_any(client, other);
}

TEST_CASE("TCPStore: a wait-any gives way to the requests of another thread on its connection") {
  SecretStore f;
  TCPStore shared("127.0.0.1", f.port(), f.client), writer("127.0.0.1", f.port(), f.client);
  std::atomic<int> gave_way{0};
  std::atomic<size_t> index{99};
  std::thread t = wait_for_go(shared, gave_way, index);
  std::this_thread::sleep_for(100ms);
  // Answered at once, not after the wait's 10 s; the wait goes on after.
  const auto t0 = std::chrono::steady_clock::now();
  shared.set("mine", "1");
  CHECK(shared.get("mine") == "1");
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  for (int i = 0; i < 200 && gave_way == 0; ++i) std::this_thread::sleep_for(10ms);  // counted after it let go
  CHECK(gave_way >= 1);
  writer.set("go", "1");
  t.join();
  CHECK(index == 0);

  std::atomic<bool> interrupted{false};
  std::thread u([&] {
    try {
      shared.wait_any({"never"}, 10s);
    } catch (const WaitGaveWay&) {
      interrupted = true;
    }
  });
  std::this_thread::sleep_for(100ms);
  shared.interrupt_wait();
  u.join();
  CHECK(interrupted);
  CHECK(shared.add("n", 1) == 1);  // the connection stays
  CHECK(f.server.connections() == 2);
}

TEST_CASE("TCPStore: a claim counts its loss, and a heartbeat leaves a wait parked") {
  SecretStore f;
  TCPStore watcher("127.0.0.1", f.port(), f.client);
  {
    TCPStore agent("127.0.0.1", f.port(), f.client);
    agent.claim("alive/1", "1", "lost");
    agent.claim("alive/2", "1", "lost");
    agent.claim("alive/3", "1", "lost");
    watcher.set("alive/3", "mine");  // taken over: it stays, and counts nothing
    CHECK(watcher.add("lost", 0) == 0);
    agent.beat("beat");  // no wait in progress: sent at once
    CHECK(watcher.get("beat") == "1");
    std::atomic<int> gave_way{0};
    std::atomic<size_t> index{99};
    std::thread t = wait_for_go(agent, gave_way, index);
    std::this_thread::sleep_for(100ms);
    for (int i = 0; i < 3; ++i) agent.beat("beat");  // sent by the waiting thread
    for (int i = 0; i < 200 && watcher.add("beat", 0) < 4; ++i) std::this_thread::sleep_for(10ms);
    CHECK(watcher.add("beat", 0) == 4);
    watcher.set("go", "1");
    t.join();
    CHECK(index == 0);
    CHECK(gave_way == 0);  // the beats did not end the wait
  }
  for (int i = 0; i < 200 && watcher.add("lost", 0) < 2; ++i) std::this_thread::sleep_for(10ms);
  CHECK(watcher.add("lost", 0) == 2);
  CHECK(watcher.multi_get({"alive/1", "alive/2", "alive/3"}) ==
        std::vector<std::optional<std::string>>{std::nullopt, std::nullopt, "mine"});
}

TEST_CASE("TCPStore: a wait-any is parked on each of its keys, and unparked from all") {
  // Finished by one key, the connection must be gone from the others' lists: a later write of
  // them must neither answer its next request nor touch freed memory (ASan).
  TCPStoreServer server({"127.0.0.1", 0});
  TCPStore waiter("127.0.0.1", server.port()), writer("127.0.0.1", server.port());
  // Catch's assertions are for the test's own thread: the waiter's thread only records.
  std::atomic<int> step{0};
  std::atomic<size_t> index{99};
  std::thread t([&] {
    index = waiter.wait_any({"a", "b", "c"}, 10s);
    step = 1;
    waiter.wait({"d"}, 10s);
    step = 2;
  });
  std::this_thread::sleep_for(100ms);
  CHECK(step == 0);
  writer.set("b", "1");
  while (step == 0) std::this_thread::sleep_for(5ms);
  writer.set("a", "1");
  writer.set("c", "1");
  std::this_thread::sleep_for(100ms);
  CHECK(step == 1);  // still waiting for "d"
  writer.set("d", "1");
  t.join();
  CHECK(index == 1);
  CHECK(step == 2);

  // Timed out, too, it is unparked from every key.
  CHECK_THROWS_AS(waiter.wait_any({"x", "y"}, 50ms), TimeoutError);
  writer.set("x", "1");
  CHECK(waiter.multi_get({"x", "y"})[0] == "1");
}

TEST_CASE("TCPStore: a client gone while parked in a wait-any leaves the server serving") {
  TCPStoreServer server({"127.0.0.1", 0});
  TCPStore writer("127.0.0.1", server.port());
  {
    TCPStore gone("127.0.0.1", server.port());
    std::atomic<bool> lost{false};
    std::thread t([&] {
      try {
        gone.wait_any({"p", "q"}, 10s);
      } catch (const StoreError&) {
        lost = true;
      }
    });
    std::this_thread::sleep_for(100ms);
    gone.abort();  // as a process that dies: its connection closes mid-wait
    t.join();
    CHECK(lost);
  }
  for (int i = 0; i < 200 && server.connections() > 1; ++i) std::this_thread::sleep_for(10ms);
  CHECK(server.connections() == 1);
  writer.set("p", "1");
  writer.set("q", "1");
  CHECK(writer.wait_any({"q"}, 1s) == 0);
}

TEST_CASE("TCPStore: a get timeout is reported by the server, not a hang") {
  TCPStoreOptions o;
  o.is_server = true;
  o.timeout = 200ms;
  TCPStore s("127.0.0.1", 0, o);
  CHECK_THROWS_WITH(s.get("missing"), Catch::Contains("'missing'"));
}

TEST_CASE("TCPStore: many clients add concurrently without losing updates") {
  TCPStoreServer server({"127.0.0.1", 0});
  constexpr int kClients = 16, kAdds = 200;
  std::vector<std::thread> ts;
  for (int c = 0; c < kClients; ++c)
    ts.emplace_back([&] {
      TCPStore s("127.0.0.1", server.port());
      for (int i = 0; i < kAdds; ++i) s.add("count", 1);
    });
  for (auto& t : ts) t.join();
  TCPStore s("127.0.0.1", server.port());
  CHECK(s.add("count", 0) == kClients * kAdds);
}

TEST_CASE("TCPStore: a wait on several keys finishes at the last one, written in any order") {
  // Waiters are parked under the first key they miss: a write of another key must not finish
  // them, a write of theirs moves them on to the next key missing, and a key removed again
  // before the last write is waited for again.
  TCPStoreServer server({"127.0.0.1", 0});
  TCPStore writer("127.0.0.1", server.port());
  std::vector<std::thread> waiters;
  std::atomic<int> through{0};
  for (int i = 0; i < 4; ++i)
    waiters.emplace_back([&, i] {
      TCPStore s("127.0.0.1", server.port());
      s.wait(i % 2 ? std::vector<std::string>{"a", "b", "c"} : std::vector<std::string>{"c", "b", "a"}, 10s);
      ++through;
    });
  writer.set("x", "1");
  writer.set("b", "1");
  writer.set("a", "1");
  writer.remove("b");
  std::this_thread::sleep_for(200ms);
  CHECK(through == 0);
  writer.set("c", "1");
  std::this_thread::sleep_for(200ms);
  CHECK(through == 0);  // "b" was removed: still waited for
  writer.set("b", "1");
  for (auto& t : waiters) t.join();
  CHECK(through == 4);
  CHECK_THROWS_AS(writer.wait({"a", "never"}, 100ms), TimeoutError);
}

TEST_CASE("TCPStore: the job secret is required") {
  SecretStore f;
  TCPStore ok("127.0.0.1", f.port(), f.client);
  ok.set("k", "v");
  TCPStoreOptions bad = f.client;
  bad.secret = "guess";
  CHECK_THROWS_AS(TCPStore("127.0.0.1", f.port(), bad), StoreError);
  CHECK(ok.get("k") == "v");  // the server kept serving
}

TEST_CASE("TCPStore: oversized frames and garbage are refused while others are served") {
  TCPStoreServerOptions so;
  so.host = "127.0.0.1";
  so.max_frame = 1024;
  TCPStoreServer server(so);
  TCPStore good("127.0.0.1", server.port());

  int huge = raw_connect(server.port());
  std::string hdr;
  wire::put_u32(hdr, 1u << 30);
  REQUIRE(::write(huge, hdr.data(), hdr.size()) == 4);
  int garbage = raw_connect(server.port());
  std::string g = wire::frame("\x7f garbage");
  REQUIRE(::write(garbage, g.data(), g.size()) == ssize_t(g.size()));
  int stalled = raw_connect(server.port());
  REQUIRE(::write(stalled, "\x10\x00", 2) == 2);  // half a header, then silence

  char c;
  CHECK(::read(huge, &c, 1) == 0);  // closed by the server
  CHECK(::read(garbage, &c, 1) == 0);
  good.set("still", "serving");
  CHECK(good.get("still") == "serving");
  ::close(huge);
  ::close(garbage);
  ::close(stalled);
}

TEST_CASE("TCPStore: a taken port and a dead server are clear errors") {
  TCPStoreServer first({"127.0.0.1", 0});
  TCPStoreServerOptions again{"127.0.0.1", first.port()};
  CHECK_THROWS_WITH(TCPStoreServer(again), Catch::Contains("already in use"));

  uint16_t port;
  std::unique_ptr<TCPStore> client;
  {
    TCPStoreServer server({"127.0.0.1", 0});
    port = server.port();
    TCPStoreOptions o;
    o.timeout = 2s;
    client = std::make_unique<TCPStore>("127.0.0.1", port, o);
    client->set("k", "v");
  }
  CHECK_THROWS_AS(client->get("k"), StoreError);
  TCPStoreOptions o;
  o.timeout = 300ms;
  CHECK_THROWS_AS(TCPStore("127.0.0.1", port, o), TimeoutError);
}

TEST_CASE("store frames: decode is total over malformed input") {
  wire::Request r;
  r.cmd = wire::Cmd::Wait;
  r.keys = {"a", "bb"};
  r.number = 99;
  auto back = wire::decode_request(wire::encode(r));
  CHECK(back.keys == r.keys);
  CHECK(back.number == 99);
  std::string enc = wire::encode(r);
  for (size_t cut = 0; cut < enc.size(); ++cut) CHECK_THROWS_AS(wire::decode_request(enc.substr(0, cut)), StoreError);
  CHECK_THROWS_AS(wire::decode_request(enc + "x"), StoreError);
  for (auto cmd : {wire::Cmd::WaitAny, wire::Cmd::MultiGet}) {
    r.cmd = cmd;
    back = wire::decode_request(wire::encode(r));
    CHECK(back.cmd == cmd);
    CHECK(back.keys == r.keys);
  }
  // A claim's count is an optional field at the end.
  r = {wire::Cmd::Claim, {"alive", "lost"}, "1", 0};
  back = wire::decode_request(wire::encode(r));
  CHECK(back.keys == r.keys);
  CHECK(back.value == "1");
  enc = wire::encode(r);
  CHECK_THROWS_AS(wire::decode_request(enc + "x"), StoreError);
  CHECK_THROWS_AS(wire::decode_request(enc.substr(0, enc.size() - 1)), StoreError);
  // So is an add's mark, a key and its value.
  r = {wire::Cmd::Add, {"count", "joined/3"}, "1", 5};
  back = wire::decode_request(wire::encode(r));
  CHECK(back.keys == r.keys);
  CHECK(back.value == "1");
  CHECK(back.number == 5);
  enc = wire::encode(r);
  CHECK_THROWS_AS(wire::decode_request(enc + "x"), StoreError);
  // Cut anywhere inside the mark (cut before it, it is a plain add).
  const size_t plain = wire::encode({wire::Cmd::Add, {"count"}, {}, 5}).size();
  CHECK(wire::decode_request(enc.substr(0, plain)).keys.size() == 1);
  for (size_t at = plain + 1; at < enc.size(); ++at)
    CHECK_THROWS_AS(wire::decode_request(enc.substr(0, at)), StoreError);
}

TEST_CASE("store frames: a multi-get reply decodes strictly") {
  const std::string v = "value", empty;
  const std::string body = wire::encode_values({&v, nullptr, &empty});
  auto values = wire::decode_values(body, 3);
  REQUIRE(values.size() == 3);
  CHECK(values[0] == "value");
  CHECK_FALSE(values[1].has_value());
  CHECK(values[2] == "");
  for (size_t cut = 0; cut < body.size(); ++cut)
    CHECK_THROWS_AS(wire::decode_values(body.substr(0, cut), 3), StoreError);
  CHECK_THROWS_AS(wire::decode_values(body + "x", 3), StoreError);
  CHECK_THROWS_AS(wire::decode_values(body, 4), StoreError);
  CHECK_THROWS_AS(wire::decode_values(std::string(1, '\2'), 1), StoreError);  // a presence byte is 0 or 1
}
