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
}

// Opens a raw TCP connection to 127.0.0.1:port.
int raw_connect(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  return fd;
}

}  // namespace

TEST_CASE("HashStore semantics") {
  HashStore s;
  exercise(s, s);
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
  TCPStoreServerOptions so;
  so.host = "127.0.0.1";
  so.secret = "s3cret";
  TCPStoreServer server(so);
  TCPStoreOptions good;
  good.secret = "s3cret";
  good.timeout = 2s;
  TCPStore ok("127.0.0.1", server.port(), good);
  ok.set("k", "v");
  TCPStoreOptions bad = good;
  bad.secret = "guess";
  CHECK_THROWS_AS(TCPStore("127.0.0.1", server.port(), bad), StoreError);
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
}
