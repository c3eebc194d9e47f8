// The store server on a listening socket bound by someone else (the launcher): adopted as is,
// validated, and chosen by rank 0 through DISTRUN_STORE_LISTEN_FD.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <future>

#include "distrun/comm/process_group.hpp"
#include "distrun/core/error.hpp"
#include "distrun/store/listen_socket.hpp"
#include "distrun/store/tcp_store.hpp"

using namespace distrun;
using namespace std::chrono_literals;

namespace {

// A TCP socket on 127.0.0.1 with a free port, bound (and listening when `listen_too`).
int bound_socket(int type = SOCK_STREAM, bool listen_too = true) {
  int fd = ::socket(AF_INET, type, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  if (listen_too && type == SOCK_STREAM) REQUIRE(::listen(fd, 64) == 0);
  return fd;
}

uint16_t port_of(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  return ntohs(a.sin_port);
}

// The message of the E that fn throws ("" when it throws nothing, which fails the match).
template <typename E, typename F>
std::string message_of(F&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

bool is_open(int fd) { return fcntl(fd, F_GETFD) != -1; }

// Sets an environment variable for the scope of a test.
struct ScopedEnv {
  std::string name;
  ScopedEnv(std::string n, const std::string& v) : name(std::move(n)) { setenv(name.c_str(), v.c_str(), 1); }
  ~ScopedEnv() { unsetenv(name.c_str()); }
};

}  // namespace

TEST_CASE("TCPStoreServer serves on an adopted listening socket and closes it") {
  int fd = bound_socket();
  const uint16_t port = port_of(fd);
  {
    TCPStoreServerOptions so;
    so.listen_fd = fd;
    so.port = 1;  // ignored: the socket is already bound
    TCPStoreServer server(so);
    CHECK(server.port() == port);
    CHECK(server.address() == "127.0.0.1");
    CHECK((fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);  // a worker's own children do not inherit it
    TCPStoreOptions o;
    o.timeout = 5s;
    TCPStore a("127.0.0.1", port, o), b("127.0.0.1", port, o);
    a.set("k", "v");
    CHECK(b.get("k") == "v");
  }
  CHECK_FALSE(is_open(fd));  // owned and closed by the server
}

TEST_CASE("TCPStore hosting on an adopted socket talks to it on its address") {
  int fd = bound_socket();
  TCPStoreOptions o;
  o.is_server = true;
  o.listen_fd = fd;
  o.timeout = 5s;
  TCPStore host("localhost", 0, o);
  CHECK(host.port() == port_of(fd));
  host.set("x", "1");
  TCPStore peer("127.0.0.1", host.port(), TCPStoreOptions{false, 5s});
  CHECK(peer.get("x") == "1");
}

TEST_CASE("a descriptor that is not a listening TCP socket is a ConfigError, and stays the caller's") {
  SECTION("not listening") {
    int fd = bound_socket(SOCK_STREAM, false);
    TCPStoreServerOptions so;
    so.listen_fd = fd;
    CHECK_THAT(message_of<ConfigError>([&] { TCPStoreServer s{so}; }), Catch::Contains("is not listening"));
    CHECK(is_open(fd));
    ::close(fd);
  }
  SECTION("UDP") {
    int fd = bound_socket(SOCK_DGRAM);
    CHECK_THAT(message_of<ConfigError>([&] { inspect_listening_socket(fd, "test"); }),
               Catch::Contains("not a stream (TCP) socket"));
    ::close(fd);
  }
  SECTION("a regular file") {
    int fd = ::open("/proc/self/cmdline", O_RDONLY);
    CHECK_THAT(message_of<ConfigError>([&] { inspect_listening_socket(fd, "test"); }),
               Catch::Contains("is not a socket"));
    ::close(fd);
  }
  SECTION("a closed descriptor") {
    int fd = bound_socket();
    ::close(fd);
    CHECK_THAT(message_of<ConfigError>([&] { inspect_listening_socket(fd, "test"); }), Catch::Contains("is not open"));
  }
  SECTION("a Unix socket") {
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    CHECK_THAT(message_of<ConfigError>([&] { inspect_listening_socket(fd, "test"); }),
               Catch::Contains("not an IPv4 or IPv6 socket"));
    ::close(fd);
  }
}

TEST_CASE("DISTRUN_STORE_LISTEN_FD: unset, malformed, or naming a listening socket") {
  unsetenv(kStoreListenFdEnv);
  CHECK(listening_socket_from_env().fd == -1);
  {
    ScopedEnv e(kStoreListenFdEnv, "7x");
    CHECK_THAT(message_of<ConfigError>([&] { listening_socket_from_env(); }),
               Catch::Contains("DISTRUN_STORE_LISTEN_FD=7x: not a descriptor number"));
  }
  int fd = bound_socket();
  ScopedEnv e(kStoreListenFdEnv, std::to_string(fd));
  auto ls = listening_socket_from_env();
  CHECK(ls.fd == fd);
  CHECK(ls.port == port_of(fd));
  CHECK(ls.address == "127.0.0.1");
  ::close(fd);
}

TEST_CASE("ProcessGroup::init: rank 0 hosts the store on the socket named by DISTRUN_STORE_LISTEN_FD") {
  int fd = bound_socket();
  const uint16_t port = port_of(fd);
  ScopedEnv e(kStoreListenFdEnv, std::to_string(fd));
  auto join = [&](int rank) {
    InitOptions o;
    o.timeout = 20s;
    o.heartbeats = false;
    WorldInfo w;
    w.rank = rank;
    w.world_size = 2;
    w.local_rank = rank;
    w.local_world_size = 2;
    w.master_addr = "127.0.0.1";
    w.master_port = port;
    o.world = w;
    auto pg = ProcessGroup::init(o);
    pg->store().set("from/" + std::to_string(rank), "here");
    return pg->store().get("from/" + std::to_string(1 - rank));
  };
  auto r1 = std::async(std::launch::async, join, 1);
  CHECK(join(0) == "here");
  CHECK(r1.get() == "here");
  CHECK_FALSE(is_open(fd));  // closed with rank 0's store
}

TEST_CASE("ProcessGroup::init: a listening socket on another port than MASTER_PORT is a ConfigError") {
  int fd = bound_socket();
  ScopedEnv e(kStoreListenFdEnv, std::to_string(fd));
  InitOptions o;
  WorldInfo w;
  w.world_size = 2;
  w.master_port = uint16_t(port_of(fd) == 1 ? 2 : 1);
  o.world = w;
  CHECK_THAT(message_of<ConfigError>([&] { ProcessGroup::init(o); }), Catch::Contains("but MASTER_PORT is"));
  ::close(fd);
}
