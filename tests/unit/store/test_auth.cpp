// The store under strangers: the session state machine, the challenge-response (the secret
// never on the wire), the strangers' own pool and deadline, bounded replies, timeouts and
// counters, close-on-exec sockets, and a log that a flood cannot fill.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <climits>
#include <functional>
#include <future>
#include <mutex>
#include <spdlog/sinks/base_sink.h>
#include <thread>

#include "distrun/core/error.hpp"
#include "distrun/core/log.hpp"
#include "distrun/store/auth.hpp"
#include "distrun/store/server_session.hpp"
#include "distrun/store/tcp_store.hpp"
#include "frame_relay.hpp"

using namespace distrun;
using namespace std::chrono_literals;

namespace {

std::string payload(wire::Cmd cmd, std::vector<std::string> keys = {}, std::string value = {}, int64_t number = 0) {
  wire::Request r;
  r.cmd = cmd;
  r.keys = std::move(keys);
  r.value = std::move(value);
  r.number = number;
  return wire::encode(r);
}

std::string fixed_nonce(size_t n) { return std::string(n, 'S'); }

int raw_connect(uint16_t port) {
  const int fd = distrun::test::connect_to("127.0.0.1", port);
  REQUIRE(fd >= 0);
  return fd;
}

// A listening socket the test plays the server on.
struct FakeServer {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  uint16_t port = 0;
  FakeServer() {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(fd, 8) == 0);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~FakeServer() { ::close(fd); }
};

std::string read_frame(int fd) {
  uint8_t hdr[4];
  if (::recv(fd, hdr, 4, MSG_WAITALL) != 4) return {};
  std::string body(wire::read_u32(hdr), '\0');
  if (!body.empty() && ::recv(fd, body.data(), body.size(), MSG_WAITALL) != ssize_t(body.size())) return {};
  return body;
}

void write_all(int fd, const std::string& s) {
  REQUIRE(::send(fd, s.data(), s.size(), MSG_NOSIGNAL) == ssize_t(s.size()));
}

// A loopback server opened by the secret "s3cret", and the options of its clients.
TCPStoreServerOptions secret_server() {
  TCPStoreServerOptions so;
  so.host = "127.0.0.1";
  so.secret = "s3cret";
  return so;
}

TCPStoreOptions secret_client() {
  TCPStoreOptions o;
  o.secret = "s3cret";
  o.timeout = 5s;
  return o;
}

// Counts the log lines of the "distrun" logger while alive.
class CountingSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  std::atomic<int> lines{0};
  std::string last;  // read once the server is gone

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    ++lines;
    last.assign(msg.payload.data(), msg.payload.size());
  }
  void flush_() override {}
};

}  // namespace

TEST_CASE("store session: no key is read or written before the secret is proved") {
  StoreData data;
  data.kv["plan"] = "port and secret";
  const std::string secret = "job-secret";
  for (auto cmd : {wire::Cmd::Get, wire::Cmd::Set, wire::Cmd::Add, wire::Cmd::Wait, wire::Cmd::Check, wire::Cmd::Remove,
                   wire::Cmd::Ping, wire::Cmd::WaitAny, wire::Cmd::MultiGet}) {
    ServerSession s(data, secret, fixed_nonce);
    auto a = s.on_frame(payload(cmd, {"plan"}, "forged"));
    CHECK(a.kind == SessionAction::Close);
    CHECK(a.body.empty());
  }
  CHECK(data.kv.size() == 1);
  CHECK(data.kv["plan"] == "port and secret");
}

TEST_CASE("store session: the challenge-response opens the session, a wrong proof closes it") {
  StoreData data;
  const std::string secret = "job-secret";
  const std::string client_nonce(auth::kNonceBytes, 'c');
  ServerSession s(data, secret, fixed_nonce);
  CHECK(s.frame_limit(1u << 20) == wire::kMaxUnauthenticatedFrame);
  auto challenge = s.on_frame(payload(wire::Cmd::Hello, {client_nonce}));
  REQUIRE(challenge.kind == SessionAction::Reply);
  CHECK(challenge.body == fixed_nonce(auth::kNonceBytes));
  CHECK(s.phase() == ServerSession::Phase::Challenged);

  SECTION("right proof") {
    auto ok =
        s.on_frame(payload(wire::Cmd::Auth, {auth::proof(secret, auth::Side::Client, challenge.body, client_nonce)}));
    CHECK(ok.kind == SessionAction::Reply);
    CHECK(ok.body == auth::proof(secret, auth::Side::Server, challenge.body, client_nonce));
    CHECK(s.open());
    CHECK(s.frame_limit(1u << 20) == (1u << 20) + auth::kTagBytes);
    auth::FrameSeal seal(auth::session_key(secret, challenge.body, client_nonce), auth::Side::Client);
    CHECK(s.on_frame(seal.seal(payload(wire::Cmd::Set, {"k"}, "v"))).wrote());
    CHECK(data.kv["k"] == "v");
  }
  SECTION("the proof of another secret") {
    auto no =
        s.on_frame(payload(wire::Cmd::Auth, {auth::proof("guess", auth::Side::Client, challenge.body, client_nonce)}));
    CHECK(no.kind == SessionAction::ReplyThenClose);
    CHECK(no.status == wire::Status::Error);
    CHECK_FALSE(s.open());
  }
  SECTION("the secret itself, as the old protocol sent it") {
    CHECK(s.on_frame(payload(wire::Cmd::Auth, {secret})).kind == SessionAction::ReplyThenClose);
    CHECK_FALSE(s.open());
  }
  SECTION("the server's own proof replayed") {
    auto replay = auth::proof(secret, auth::Side::Server, challenge.body, client_nonce);
    CHECK(s.on_frame(payload(wire::Cmd::Auth, {replay})).kind == SessionAction::ReplyThenClose);
  }
  SECTION("a second Hello") {
    CHECK(s.on_frame(payload(wire::Cmd::Hello, {client_nonce})).kind == SessionAction::Close);
  }
}

TEST_CASE("store session: add cannot overflow, waits are clamped") {
  StoreData data;
  ServerSession s(data, "");
  CHECK(s.on_frame(payload(wire::Cmd::Add, {"n"}, {}, INT64_MAX)).status == wire::Status::Ok);
  auto a = s.on_frame(payload(wire::Cmd::Add, {"n"}, {}, 1));
  CHECK(a.status == wire::Status::Error);
  CHECK_THAT(a.body, Catch::Contains("overflows"));
  CHECK(data.kv["n"] == std::to_string(INT64_MAX));
  auto w = s.on_frame(payload(wire::Cmd::Wait, {"never"}, {}, INT64_MAX));
  CHECK(w.kind == SessionAction::Park);
  CHECK(w.park_for.count() == wire::kMaxTimeoutMs);
  auto neg = s.on_frame(payload(wire::Cmd::Get, {"never"}, {}, INT64_MIN));
  CHECK(neg.park_for.count() == 0);
}

TEST_CASE("TCPStore: the secret never crosses the wire, and a server must prove it too") {
  const std::string secret = "0123456789abcdef-the-job-secret";
  FakeServer fake;
  auto server = std::async(std::launch::async, [&] {
    int c = ::accept(fake.fd, nullptr, nullptr);
    std::string hello = read_frame(c);
    write_all(c, wire::frame(std::string(1, '\0') + std::string(auth::kNonceBytes, 'n')));
    std::string proof = read_frame(c);
    // An impostor that does not know the secret answers with a made-up proof.
    write_all(c, wire::frame(std::string(1, '\0') + std::string(auth::kProofBytes, 'x')));
    ::close(c);
    return hello + proof;
  });
  TCPStoreOptions o;
  o.secret = secret;
  o.timeout = 5s;
  CHECK_THROWS_WITH(TCPStore("127.0.0.1", fake.port, o), Catch::Contains("could not prove the job secret"));
  std::string seen = server.get();
  CHECK(seen.size() > 2 * auth::kNonceBytes);
  CHECK(seen.find(secret) == std::string::npos);
  CHECK(seen.find("0123456789") == std::string::npos);
}

TEST_CASE("TCPStore: a client with a secret refuses a store that asks for none") {
  TCPStoreServer open_server({"127.0.0.1", 0});
  TCPStoreOptions o;
  o.secret = "mine";
  o.timeout = 5s;
  CHECK_THROWS_WITH(TCPStore("127.0.0.1", open_server.port(), o), Catch::Contains("asks for no job secret"));
}

TEST_CASE("TCPStore: a reply over the bound is refused without allocating it") {
  FakeServer fake;
  auto server = std::async(std::launch::async, [&] {
    int c = ::accept(fake.fd, nullptr, nullptr);
    read_frame(c);                     // a set
    write_all(c, "\xff\xff\xff\xff");  // "4 GiB follow"
    std::this_thread::sleep_for(200ms);
    ::close(c);
  });
  TCPStoreOptions o;
  o.timeout = 5s;
  TCPStore client("127.0.0.1", fake.port, o);
  CHECK_THROWS_WITH(client.set("k", "v"), Catch::Contains("over the bound"));
  server.get();
}

TEST_CASE("TCPStore: huge timeouts and counters do not overflow") {
  TCPStoreServerOptions so;
  so.host = "127.0.0.1";
  TCPStoreServer server(so);
  TCPStoreOptions o;
  o.timeout = std::chrono::milliseconds(INT64_MAX);
  TCPStore a("127.0.0.1", server.port(), o), b("127.0.0.1", server.port(), TCPStoreOptions{false, 5s});
  auto later = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(50ms);
    b.set("late", "v");
  });
  a.wait({"late"}, std::chrono::milliseconds(INT64_MAX));
  CHECK(a.get("late") == "v");
  later.get();
  CHECK(a.add("n", INT64_MAX) == INT64_MAX);
  CHECK_THROWS_WITH(a.add("n", 1), Catch::Contains("overflows"));
  CHECK(a.add("n", -1) == INT64_MAX - 1);  // the counter survived, so did the connection
  CHECK_THROWS_AS(a.wait({"never"}, std::chrono::milliseconds(-5)), TimeoutError);
}

TEST_CASE("TCPStore: a flood of strangers stays in its own pool while a rank joins and works") {
  TCPStoreServerOptions so;
  so.host = "127.0.0.1";
  so.secret = "s3cret";
  so.max_unauthenticated = 8;
  so.auth_timeout = 2s;
  TCPStoreServer server(so);
  TCPStoreOptions o;
  o.secret = "s3cret";
  o.timeout = 10s;
  TCPStore before("127.0.0.1", server.port(), o);
  std::vector<int> flood;
  for (int i = 0; i < 300; ++i) flood.push_back(raw_connect(server.port()));  // silent strangers
  TCPStore during("127.0.0.1", server.port(), o);                             // joins through the flood
  during.set("k", "v");
  CHECK(before.get("k") == "v");
  // At most the pool's worth of strangers is held (plus the two ranks).
  for (int i = 0; i < 100 && server.connections() > 2 + 8; ++i) std::this_thread::sleep_for(20ms);
  CHECK(server.connections() <= 2 + 8);
  for (int fd : flood) ::close(fd);
}

TEST_CASE("TCPStore: a stranger that never proves the secret is closed at its deadline") {
  TCPStoreServerOptions so;
  so.host = "127.0.0.1";
  so.secret = "s3cret";
  so.auth_timeout = 200ms;
  TCPStoreServer server(so);
  int silent = raw_connect(server.port());
  timeval tv{5, 0};
  setsockopt(silent, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char c;
  CHECK(::recv(silent, &c, 1, 0) == 0);  // closed by the server, well before 5 s
  ::close(silent);
}

TEST_CASE("TCPStore: every socket of server and client is close-on-exec") {
  TCPStoreOptions o;
  o.is_server = true;
  o.secret = "s3cret";
  o.timeout = 5s;
  TCPStore host("127.0.0.1", 0, o);
  TCPStoreOptions c;
  c.secret = "s3cret";
  c.timeout = 5s;
  TCPStore peer("127.0.0.1", host.port(), c);
  peer.set("k", "v");
  int sockets = 0;
  DIR* d = opendir("/proc/self/fd");
  REQUIRE(d);
  while (dirent* e = readdir(d)) {
    int fd = std::atoi(e->d_name);
    struct stat st {};
    if (e->d_name[0] == '.' || fd == dirfd(d) || fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    ++sockets;
    INFO("socket descriptor " << fd);
    CHECK((fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
  }
  closedir(d);
  CHECK(sockets >= 5);  // listener, two clients, two accepted
}

TEST_CASE("TCPStore: a flood of wrong secrets writes a bounded log") {
  auto sink = std::make_shared<CountingSink>();
  log().sinks().push_back(sink);
  {
    TCPStoreServerOptions so;
    so.host = "127.0.0.1";
    so.secret = "s3cret";
    TCPStoreServer server(so);
    for (int i = 0; i < 500; ++i) {
      int fd = raw_connect(server.port());
      write_all(fd, wire::frame(payload(wire::Cmd::Auth, {"guess"})));
      char c;
      ::recv(fd, &c, 1, 0);  // until the server closes it
      ::close(fd);
    }
    TCPStoreOptions o;
    o.secret = "s3cret";
    o.timeout = 5s;
    TCPStore ok("127.0.0.1", server.port(), o);
    ok.set("still", "serving");
  }
  log().sinks().pop_back();
  INFO("log lines for 500 strangers: " << sink->lines.load());
  CHECK(sink->lines.load() >= 1);
  CHECK(sink->lines.load() <= 12);
  // The count of lines left out is said when the server stops, within the minute too.
  CHECK_THAT(sink->last, Catch::Contains("more lines about unauthenticated connections left out"));
}

namespace {

// The session of `s` opened with `secret`, and the client's side of its frames.
auth::FrameSeal open_session(ServerSession& s, const std::string& secret) {
  const std::string client_nonce(auth::kNonceBytes, 'c');
  auto challenge = s.on_frame(payload(wire::Cmd::Hello, {client_nonce}));
  auto ok =
      s.on_frame(payload(wire::Cmd::Auth, {auth::proof(secret, auth::Side::Client, challenge.body, client_nonce)}));
  REQUIRE(s.open());
  // The proof's reply is not sealed: it proves the server by itself.
  CHECK(s.reply_payload(ok).size() == 1 + auth::kProofBytes);
  return auth::FrameSeal(auth::session_key(secret, challenge.body, client_nonce), auth::Side::Client);
}

}  // namespace

TEST_CASE("store session: after the proof every frame is sealed, and an altered, replayed or unsealed one closes it") {
  StoreData data;
  const std::string secret = "job-secret";
  ServerSession s(data, secret, fixed_nonce);
  auth::FrameSeal client = open_session(s, secret);
  auth::FrameSeal server_view = client;  // what a client holding the key reads back

  const std::string set1 = client.seal(payload(wire::Cmd::Add, {"n"}, {}, 1));
  auto a = s.on_frame(set1);
  REQUIRE(a.kind == SessionAction::Reply);
  CHECK(data.kv["n"] == "1");
  // The reply is sealed too: its tag opens only under this session's key and count.
  const std::string reply = s.reply_payload(a);
  CHECK(reply.size() == 1 + 8 + auth::kTagBytes);
  CHECK(std::string(server_view.open(reply)).size() == 1 + 8);

  SECTION("a recorded frame replayed") {
    CHECK(s.on_frame(set1).kind == SessionAction::Close);
    CHECK(data.kv["n"] == "1");
  }
  SECTION("a frame altered (one bit of its value)") {
    std::string f = client.seal(payload(wire::Cmd::Set, {"k"}, "value"));
    f[f.size() - auth::kTagBytes - 1] ^= 1;
    CHECK(s.on_frame(f).kind == SessionAction::Close);
    CHECK_FALSE(data.has("k"));
  }
  SECTION("a frame without a tag, as a client of no secret sends it") {
    CHECK(s.on_frame(payload(wire::Cmd::Set, {"k"}, "v")).kind == SessionAction::Close);
    CHECK_FALSE(data.has("k"));
  }
  SECTION("frames out of order") {
    const std::string second = client.seal(payload(wire::Cmd::Set, {"a"}, "1"));
    const std::string third = client.seal(payload(wire::Cmd::Set, {"b"}, "2"));
    CHECK(s.on_frame(third).kind == SessionAction::Close);
    CHECK(data.kv.size() == 1);
    (void)second;
  }
  SECTION("a frame of another session with the same secret") {
    StoreData other_data;
    ServerSession other(other_data, secret, [](size_t n) { return std::string(n, 'T'); });
    auth::FrameSeal other_client = open_session(other, secret);
    (void)other_client.seal(payload(wire::Cmd::Ping));  // both at count 1
    CHECK(s.on_frame(other_client.seal(payload(wire::Cmd::Set, {"k"}, "v"))).kind == SessionAction::Close);
    CHECK_FALSE(data.has("k"));
  }
  SECTION("the server's own reply reflected back") { CHECK(s.on_frame(reply).kind == SessionAction::Close); }
}

namespace {

std::string to_hex(std::string_view bytes) {
  std::string hex;
  for (unsigned char c : bytes) {
    char b[3];
    std::snprintf(b, sizeof b, "%02x", c);
    hex += b;
  }
  return hex;
}

}  // namespace

TEST_CASE("auth: HKDF-SHA256 gives RFC 5869's first test vector") {
  const std::string ikm(22, '\x0b');
  std::string salt, info;
  for (int i = 0; i <= 0x0c; ++i) salt.push_back(char(i));
  for (int i = 0xf0; i <= 0xf9; ++i) info.push_back(char(i));
  CHECK(to_hex(auth::hkdf(ikm, salt, info, 42)) ==
        "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865");
}

TEST_CASE("auth: HMAC-SHA256 gives RFC 4231's second test vector, one-shot and through a Mac") {
  const std::string tag = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843";
  CHECK(to_hex(auth::hmac("Jefe", "what do ya want for nothing?")) == tag);
  auth::Mac mac("Jefe");
  CHECK(to_hex(mac({"what do ya want for nothing?"})) == tag);
  CHECK(to_hex(mac({"what do ya ", "", "want for nothing?"})) == tag);  // parts: their concatenation
}

TEST_CASE("auth: one Mac used for many messages tags each as the one-shot hmac does") {
  const std::string key = "a key of the session";
  auth::Mac mac(key);
  const std::vector<std::string> messages = {"", "a", std::string(64, 'x'), std::string(1000, '\0'), "last"};
  for (int round = 0; round < 2; ++round)  // the same message again gets the same tag
    for (const auto& m : messages) CHECK(mac({m}) == auth::hmac(key, m));
  CHECK(mac({"head|", "body|", "tail"}) == auth::hmac(key, "head|body|tail"));
  auth::Mac copy(mac);  // a copy carries the key schedule, not a state left by a message
  CHECK(copy({"last"}) == auth::hmac(key, "last"));
  CHECK(mac({"last"}) != auth::hmac("another key", "last"));
}

TEST_CASE("auth: the entropy estimate passes generated secrets and refuses words and patterns") {
  // `openssl rand -hex 16`, `head -c 32 /dev/urandom | base64`, `openssl rand -base64 16`
  CHECK(auth::estimated_entropy_bits("3f9c0a7be21d4c5f8a6e9b0d17c2e4a8") >= 128);
  CHECK(auth::estimated_entropy_bits("q3Zx9Kp0Lr7YwV2sNf8Hc1Jt5Bm4Gd6Ue0Aa3Ri9Oo=") >= 128);
  CHECK(auth::estimated_entropy_bits("Zx9Kp0Lr7YwV2sNf8Hc1Jg==") >= 128);
  CHECK(auth::estimated_entropy_bits("x") < 128);
  CHECK(auth::estimated_entropy_bits("s3cret") < 128);
  CHECK(auth::estimated_entropy_bits("correcthorsebattery") < 128);
  CHECK(auth::estimated_entropy_bits(std::string(64, 'a')) < 128);
  CHECK(auth::estimated_entropy_bits(std::string(40, '7')) < 128);
  std::string ab;
  for (int i = 0; i < 32; ++i) ab += "ab";
  CHECK(auth::estimated_entropy_bits(ab) < 128);
  CHECK(auth::estimated_entropy_bits("passwordpasswordpasswordpassword") < 128);
  CHECK(auth::estimated_entropy_bits("12345678901234567890123456789012345") < 128);
}

TEST_CASE("TCPStore: a frame replayed or altered on the wire is refused, and the session ends") {
  TCPStoreServer server(secret_server());
  TCPStoreOptions o = secret_client();
  TCPStore honest("127.0.0.1", server.port(), o);
  // Frames 0 and 1 are the handshake; frame 2 is the first request.
  SECTION("replayed: the add counts once, the connection is closed") {
    test::FrameRelay relay("127.0.0.1", 0, "127.0.0.1", server.port(), [](int, int i, const std::string& f) {
      return i == 2 ? std::vector<std::string>{f, f} : std::vector<std::string>{f};
    });
    TCPStore victim("127.0.0.1", relay.port(), o);
    CHECK(victim.add("n", 1) == 1);
    CHECK_THROWS_AS(victim.add("n", 1), StoreError);
    CHECK(honest.add("n", 0) == 1);
  }
  SECTION("altered: the value never lands") {
    test::FrameRelay relay("127.0.0.1", 0, "127.0.0.1", server.port(), [](int, int i, std::string f) {
      if (i == 2) f[f.size() - auth::kTagBytes - 1] = 'X';
      return std::vector<std::string>{f};
    });
    TCPStore victim("127.0.0.1", relay.port(), o);
    CHECK_THROWS_AS(victim.set("k", "value"), StoreError);
    CHECK_FALSE(honest.check({"k"}));
  }
}

TEST_CASE("TCPStore: a claimed key lives as long as the connection that claimed it") {
  TCPStoreServer server(secret_server());
  TCPStoreOptions o = secret_client();
  TCPStore watcher("127.0.0.1", server.port(), o);
  auto gone = [&](const std::string& key) {
    for (int i = 0; i < 200 && watcher.check({key}); ++i) std::this_thread::sleep_for(10ms);
    return !watcher.check({key});
  };
  {
    TCPStore agent("127.0.0.1", server.port(), o);
    agent.claim("alive/1", "1");
    agent.claim("alive/2", "1");
    watcher.set("alive/2", "taken over");  // a plain set makes it an ordinary key
    CHECK(watcher.get("alive/1") == "1");
  }
  CHECK(gone("alive/1"));
  CHECK(watcher.get("alive/2") == "taken over");
}

TEST_CASE("TCPStore: with keep_on_timeout a late reply does not end the connection") {
  TCPStoreServer server(secret_server());
  TCPStoreOptions o = secret_client();
  for (bool keep : {true, false}) {
    // The relay holds the first request for 3 s, as a network blip would.
    test::FrameRelay relay("127.0.0.1", 0, "127.0.0.1", server.port(), [](int, int i, const std::string& f) {
      if (i == 2) std::this_thread::sleep_for(3s);
      return std::vector<std::string>{f};
    });
    o.keep_on_timeout = keep;
    TCPStore client("127.0.0.1", relay.port(), o);
    client.set_timeout(0ms);  // each request waits its 2 s of slack only
    const std::string key = keep ? "kept" : "closed";
    CHECK_THROWS_AS(client.add(key, 1), TimeoutError);
    if (keep) {
      CHECK(client.add(key, 1) == 2);  // the late reply was read first; both adds counted
    } else {
      CHECK_THROWS_WITH(client.add(key, 1), Catch::Contains("lost earlier"));
    }
  }
}
