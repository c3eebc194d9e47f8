// The socket path's connections: made on first use, only between the pairs that exchange, and
// only with a peer that proves the group's key; strangers, replays and wrong ranks are dropped
// without holding up the group.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "distrun/core/error.hpp"
#include "distrun/host/paths/socket_mesh.hpp"
#include "distrun/store/hash_store.hpp"
#include "loopback.hpp"

using namespace distrun;

namespace {

// A connection to the address `at` (as the store holds it).
int connect_to(const std::string& at) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(connect(fd, reinterpret_cast<const sockaddr*>(at.data()), socklen_t(at.size())) == 0);
  return fd;
}

// True when the other end closed `fd` (within 10 s) without sending a byte.
bool closed_without_a_byte(int fd) {
  pollfd p{fd, POLLIN, 0};
  char byte = 0;
  const bool closed = poll(&p, 1, 10000) == 1 && recv(fd, &byte, 1, 0) == 0;
  close(fd);
  return closed;
}

// Every rank sends its rank to the next around a ring and receives the previous one's; the
// errors by rank ("" where none).
std::vector<std::string> ring(std::vector<std::unique_ptr<SocketMesh>>& mesh, std::vector<int>& got,
                              std::chrono::seconds within = std::chrono::seconds(20)) {
  const int n = int(mesh.size());
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> ranks;
  for (int r = 0; r < n; ++r)
    ranks.emplace_back([&, r] {
      try {
        const auto deadline = SocketMesh::Clock::now() + within;
        auto out = std::make_shared<SocketMesh::Send>();
        auto in = std::make_shared<SocketMesh::Recv>();
        out->key = in->key = {SocketMesh::Kind::Message, 1};
        out->parts = {{reinterpret_cast<const char*>(&r), sizeof r}};
        in->parts = {{reinterpret_cast<char*>(&got[size_t(r)]), sizeof(int)}};
        mesh[size_t(r)]->post((r + n - 1) % n, in, deadline);
        mesh[size_t(r)]->post((r + 1) % n, out, deadline);
        mesh[size_t(r)]->progress([&] { return in->done && out->done; }, deadline);
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
    });
  for (auto& t : ranks) t.join();
  return errors;
}

std::vector<std::unique_ptr<SocketMesh>> group(const std::shared_ptr<Store>& store, int n,
                                               const std::string& secret = "") {
  std::vector<std::unique_ptr<SocketMesh>> mesh;
  for (int r = 0; r < n; ++r)
    mesh.push_back(std::make_unique<SocketMesh>(store, r, n, loopback(), std::vector<int>{}, secret));
  return mesh;
}

template <typename T>
void send_all(int fd, const T& what) {
  REQUIRE(send(fd, &what, sizeof what, 0) == ssize_t(sizeof what));
}

}  // namespace

TEST_CASE("a ring opens two connections a rank; strangers that send garbage or nothing hold up no one", "[sockets]") {
  const int n = 6;
  auto store = std::make_shared<HashStore>();
  auto mesh = group(store, n);
  // They know rank 5's address (the store's value) and are first in the listener's queue: one
  // sends a hello-sized block of garbage, three connect and stay silent. The ring's calls have
  // 4 s: were each silent one to hold the listener for seconds, as an accept that waits for
  // its hello would, they would time out.
  const std::string at = store->get("sock/addr/5");
  const int garbage = connect_to(at);
  const int silent[] = {connect_to(at), connect_to(at), connect_to(at)};
  pair_auth::Hello junk{};
  std::memset(&junk, 0x5a, sizeof junk);
  send_all(garbage, junk);

  std::vector<int> got(n, -1);
  const auto errors = ring(mesh, got, std::chrono::seconds(4));
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r);
    CHECK(errors[size_t(r)] == "");
    CHECK(got[size_t(r)] == (r + n - 1) % n);
    CHECK(mesh[size_t(r)]->connections() == 2);
  }
  CHECK(closed_without_a_byte(garbage));
  for (int fd : silent) close(fd);
}

TEST_CASE("a hello under another key, with other ranks, or replayed is dropped; the group still connects",
          "[sockets]") {
  const int n = 3;
  auto store = std::make_shared<HashStore>();
  auto mesh = group(store, n, "the workers' secret");
  const std::string id = store->get("sock/group");
  const std::string key = pair_auth::group_key("the workers' secret", id);
  const std::string at2 = store->get("sock/addr/2");
  // Without a secret the key's input would be in the store: here it is not.
  CHECK_FALSE(store->check({"sock/key"}));

  const int wrong_key = connect_to(at2);
  send_all(wrong_key, pair_auth::hello(pair_auth::group_key("another secret", id), id, 0, 2));
  // Rank 0's hello to rank 1, sent to rank 2 with its `to` changed: the proof covers the ranks.
  pair_auth::Hello moved = pair_auth::hello(key, id, 0, 1);
  moved.to = 2;
  const int wrong_rank = connect_to(at2);
  send_all(wrong_rank, moved);
  // The group's key but a rank that cannot connect to 2 (the lower rank connects).
  const int upward = connect_to(at2);
  send_all(upward, pair_auth::hello(key, id, 2, 2));

  std::vector<int> got(n, -1);
  auto errors = ring(mesh, got);
  for (int r = 0; r < n; ++r) CHECK(errors[size_t(r)] == "");
  CHECK(closed_without_a_byte(wrong_key));
  CHECK(closed_without_a_byte(wrong_rank));
  CHECK(closed_without_a_byte(upward));

  // A genuine hello (the key is known here, as it is to rank 0) for a pair already connected:
  // each lower rank is let in once, so a copy of its hello, sent later, is refused.
  const int again = connect_to(at2);
  send_all(again, pair_auth::hello(key, id, 0, 2));
  got.assign(n, -1);
  errors = ring(mesh, got);
  for (int r = 0; r < n; ++r) CHECK(errors[size_t(r)] == "");
  CHECK(closed_without_a_byte(again));
  CHECK(mesh[2]->connections() == 2);
}

TEST_CASE("a handshake seen on the wire and sent again is refused", "[sockets]") {
  auto store = std::make_shared<HashStore>();
  auto mesh = group(store, 2, "the workers' secret");
  // A relay between rank 0 and rank 1 records what rank 0 says first, as a sniffer would.
  const std::string real = store->get("sock/addr/1");
  const int relay = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_storage at = loopback();
  socklen_t len = sizeof(sockaddr_in);
  REQUIRE(bind(relay, reinterpret_cast<sockaddr*>(&at), len) == 0);
  REQUIRE(listen(relay, 4) == 0);
  REQUIRE(getsockname(relay, reinterpret_cast<sockaddr*>(&at), &len) == 0);
  store->set("sock/addr/1", std::string(reinterpret_cast<const char*>(&at), len));
  std::mutex mu;
  std::string seen;  // what rank 0 sent through the relay
  std::atomic<bool> stop{false};
  std::thread pump([&] {
    const int a = accept(relay, nullptr, nullptr);
    const int b = connect_to(real);
    char buf[4096];
    while (!stop) {
      pollfd p[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
      if (poll(p, 2, 50) <= 0) continue;
      for (int i = 0; i < 2; ++i) {
        if (!p[i].revents) continue;
        const ssize_t k = recv(p[i].fd, buf, sizeof buf, 0);
        if (k <= 0) stop = true;
        if (k <= 0) break;
        if (i == 0) {
          std::lock_guard lock(mu);
          seen.append(buf, size_t(k));
        }
        send(i == 0 ? b : a, buf, size_t(k), MSG_NOSIGNAL);
      }
    }
    close(a);
    close(b);
  });
  std::vector<int> got(2, -1);
  const auto errors = ring(mesh, got);
  CHECK(errors == std::vector<std::string>{"", ""});
  CHECK(got == std::vector<int>{1, 0});
  std::string wire;
  {
    std::lock_guard lock(mu);
    wire = seen;
  }
  REQUIRE(wire.size() >= sizeof(pair_auth::Hello));
  // Nothing of the key or the secret travelled, only the proof.
  CHECK(wire.find("the workers' secret") == std::string::npos);
  CHECK(wire.find(pair_auth::group_key("the workers' secret", store->get("sock/group"))) == std::string::npos);

  // The recorded hello, sent again to rank 1 while the group goes on over its connection.
  const int replay = connect_to(real);
  REQUIRE(send(replay, wire.data(), sizeof(pair_auth::Hello), 0) == ssize_t(sizeof(pair_auth::Hello)));
  got.assign(2, -1);
  CHECK(ring(mesh, got) == std::vector<std::string>{"", ""});
  CHECK(got == std::vector<int>{1, 0});
  CHECK(closed_without_a_byte(replay));
  CHECK(mesh[1]->connections() == 1);
  stop = true;
  pump.join();
  close(relay);
}

TEST_CASE("a member under another workers' secret is refused: a typed error, not a hang", "[sockets]") {
  auto store = std::make_shared<HashStore>();
  SocketMesh a(store, 0, 2, loopback(), {}, "one secret"), b(store, 1, 2, loopback(), {}, "another secret");
  const auto deadline = SocketMesh::Clock::now() + std::chrono::seconds(3);
  int x = 1, y = 0;
  std::string error_a;
  std::thread t([&] {
    auto out = std::make_shared<SocketMesh::Send>();
    auto in = std::make_shared<SocketMesh::Recv>();
    out->key = in->key = {SocketMesh::Kind::Message, 1};
    out->parts = {{reinterpret_cast<const char*>(&x), sizeof x}};
    in->parts = {{reinterpret_cast<char*>(&y), sizeof y}};
    try {
      a.post(1, out, deadline);
      a.post(1, in, deadline);
      a.progress([&] { return in->done; }, deadline);
    } catch (const BackendError& e) {
      error_a = e.what();
    }
  });
  auto in = std::make_shared<SocketMesh::Recv>();
  in->key = {SocketMesh::Kind::Message, 1};
  in->parts = {{reinterpret_cast<char*>(&y), sizeof y}};
  b.post(0, in, deadline);
  CHECK_THROWS_AS(b.progress([&] { return in->done; }, deadline), TimeoutError);
  t.join();
  CHECK_THAT(error_a, Catch::Contains("refused this rank's connection") && Catch::Contains("DISTRUN_STORE_SECRET"));
}

TEST_CASE("groups share the process's one listener; a group made later still gets its connections", "[sockets]") {
  auto first_store = std::make_shared<HashStore>(), later_store = std::make_shared<HashStore>();
  auto first = group(first_store, 3, "the workers' secret");
  std::vector<int> got(3, -1);
  CHECK(ring(first, got) == std::vector<std::string>(3, ""));
  // A hello naming a group the listener does not serve is dropped, whatever its key.
  const std::string unknown(pair_auth::kGroupBytes, 'u');
  const int stranger = connect_to(first_store->get("sock/addr/2"));
  send_all(stranger, pair_auth::hello(pair_auth::group_key("the workers' secret", unknown), unknown, 0, 2));

  auto later = group(later_store, 3, "the workers' secret");
  for (int r = 0; r < 3; ++r)
    CHECK(later_store->get("sock/addr/" + std::to_string(r)) == first_store->get("sock/addr/0"));
  got.assign(3, -1);
  CHECK(ring(later, got) == std::vector<std::string>(3, ""));
  CHECK(got == std::vector<int>{2, 0, 1});
  got.assign(3, -1);
  CHECK(ring(first, got) == std::vector<std::string>(3, ""));
  CHECK(closed_without_a_byte(stranger));
}

TEST_CASE("large blocking sends posted around a cycle before any receive complete", "[sockets]") {
  // Each rank sends 8 MiB to the next and waits for it, then receives from the previous: no
  // socket buffer holds a whole message, so each send completes only if its receiver reads
  // while it is itself blocked sending.
  const int n = 3;
  auto store = std::make_shared<HashStore>();
  auto mesh = group(store, n);
  const size_t bytes = size_t(8) << 20;
  std::vector<std::vector<char>> out(n), in(n);
  std::vector<std::string> errors(n);
  std::vector<std::thread> ranks;
  for (int r = 0; r < n; ++r)
    ranks.emplace_back([&, r] {
      out[size_t(r)].assign(bytes, char('a' + r));
      in[size_t(r)].assign(bytes, 0);
      try {
        const auto deadline = SocketMesh::Clock::now() + std::chrono::seconds(20);
        auto send = std::make_shared<SocketMesh::Send>();
        auto recv = std::make_shared<SocketMesh::Recv>();
        send->key = recv->key = {SocketMesh::Kind::Message, 1};
        send->parts = {{out[size_t(r)].data(), bytes}};
        recv->parts = {{in[size_t(r)].data(), bytes}};
        mesh[size_t(r)]->post((r + 1) % n, send, deadline);
        mesh[size_t(r)]->progress([&] { return send->done; }, deadline);
        mesh[size_t(r)]->post((r + n - 1) % n, recv, deadline);
        mesh[size_t(r)]->progress([&] { return recv->done; }, deadline);
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r);
    CHECK(errors[size_t(r)] == "");
    const bool from_previous = in[size_t(r)] == std::vector<char>(bytes, char('a' + (r + n - 1) % n));
    CHECK(from_previous);
  }
}

TEST_CASE("a send abandoned mid-message cuts its connection: the next operation with that peer fails at once",
          "[sockets]") {
  auto store = std::make_shared<HashStore>();
  auto mesh = group(store, 2);
  // Rank 1 never reads: no socket buffer holds 8 MiB, so the send stops mid-message.
  std::vector<char> big(size_t(8) << 20, 'x');
  auto send = std::make_shared<SocketMesh::Send>();
  send->key = {SocketMesh::Kind::Message, 1};
  send->parts = {{big.data(), big.size()}};
  const auto soon = SocketMesh::Clock::now() + std::chrono::milliseconds(300);
  mesh[0]->post(1, send, soon);
  CHECK_THROWS_AS(mesh[0]->progress([&] { return send->done; }, soon), TimeoutError);
  mesh[0]->abandon(1, send);
  auto next = std::make_shared<SocketMesh::Recv>();
  next->key = {SocketMesh::Kind::Message, 2};
  CHECK_THROWS_WITH(mesh[0]->post(1, next, SocketMesh::Clock::now() + std::chrono::seconds(5)),
                    Catch::Contains("cut the connection"));
}

TEST_CASE("a cut fails the receives posted on it at once with its reason, and its peer learns that reason",
          "[sockets]") {
  auto store = std::make_shared<HashStore>();
  auto mesh = group(store, 2);
  std::vector<int> got(2, -1);
  REQUIRE(ring(mesh, got) == std::vector<std::string>(2, ""));  // connects the pair
  // Each rank waits for a message the other never sends; rank 0 then hangs up on rank 1.
  int into[2] = {};
  std::shared_ptr<SocketMesh::Recv> waiting[2];
  const auto deadline = SocketMesh::Clock::now() + std::chrono::seconds(10);
  for (int r = 0; r < 2; ++r) {
    waiting[r] = std::make_shared<SocketMesh::Recv>();
    waiting[r]->key = {SocketMesh::Kind::Message, 2};
    waiting[r]->parts = {{reinterpret_cast<char*>(&into[r]), sizeof(int)}};
    mesh[size_t(r)]->post(1 - r, waiting[r], deadline);
  }
  mesh[0]->cut(1, "sent what no rank of this build sends");
  std::string said[2];
  for (int r = 0; r < 2; ++r) {
    try {
      mesh[size_t(r)]->progress([&] { return waiting[r]->done; }, deadline);
      said[r] = "nothing";
    } catch (const TimeoutError& e) {
      said[r] = std::string("timed out: ") + e.what();
    } catch (const BackendError& e) {
      said[r] = e.what();
    }
  }
  // The cut's own reason on rank 0, its words and who said them on rank 1; neither a timeout.
  CHECK(said[0] == "rank 1 sent what no rank of this build sends");
  CHECK(said[1] == "rank 0 hung up on this rank: rank 1 sent what no rank of this build sends");
}

TEST_CASE("a cut fails the waits that need its peer, typed and naming it; a wait on another peer goes on",
          "[sockets]") {
  auto store = std::make_shared<HashStore>();
  auto mesh = group(store, 3);
  std::vector<int> got(3, -1);
  REQUIRE(ring(mesh, got) == std::vector<std::string>(3, ""));  // connects every pair
  const auto deadline = SocketMesh::Clock::now() + std::chrono::seconds(10);
  // Rank 0 waits on ranks 1 and 2; rank 1 hangs up on it, and rank 2 then sends its message.
  int into[2] = {};
  std::shared_ptr<SocketMesh::Recv> from[2];
  for (int i = 0; i < 2; ++i) {
    from[i] = std::make_shared<SocketMesh::Recv>();
    from[i]->key = {SocketMesh::Kind::Message, 2};
    from[i]->parts = {{reinterpret_cast<char*>(&into[i]), sizeof(int)}};
    mesh[0]->post(1 + i, from[i], deadline);
  }
  mesh[1]->cut(0, "sent what no rank of this build sends");
  const int two = 2;
  auto send = std::make_shared<SocketMesh::Send>();
  send->key = {SocketMesh::Kind::Message, 2};
  send->parts = {{reinterpret_cast<const char*>(&two), sizeof two}};
  mesh[2]->post(0, send, deadline);
  mesh[2]->progress([&] { return send->done; }, deadline);
  // Both connections are ready at once: the wait that needs rank 2 alone takes its message.
  auto only = [](int peer) { return [peer] { return std::vector<int>{peer}; }; };
  mesh[0]->progress([&] { return from[1]->done; }, deadline, {}, false, only(2));
  CHECK(into[1] == 2);
  // The wait that needs rank 1 fails at once, naming it and the cut's reason, as every later
  // one with it does; waits on rank 2 still go on with its receive posted.
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      mesh[0]->progress([&] { return from[0]->done; }, deadline, {}, false, only(1));
      FAIL("the wait on the rank that hung up raised nothing");
    } catch (const CutError& e) {
      CHECK(e.peer() == 1);
      CHECK(e.reason() == "rank 0 sent what no rank of this build sends");
    }
    auto again = std::make_shared<SocketMesh::Recv>();
    again->key = {SocketMesh::Kind::Message, uint64_t(3 + attempt)};
    again->parts = {{reinterpret_cast<char*>(&into[1]), sizeof(int)}};
    mesh[0]->post(2, again, deadline);
    send->key = again->key;
    mesh[2]->post(0, send, deadline);
    mesh[0]->progress([&] { return again->done; }, deadline, {}, false, only(2));
  }
}

TEST_CASE("a write that fails on a cut's reset before its rank read the cut raises the cut's reason, typed",
          "[sockets]") {
  auto store = std::make_shared<HashStore>();
  auto mesh = group(store, 2);
  std::vector<int> got(2, -1);
  REQUIRE(ring(mesh, got) == std::vector<std::string>(2, ""));  // connects the pair
  mesh[0]->cut(1, "sent what no rank of this build sends");
  // Rank 1 reads nothing: it only sends, and the first message that reaches the closed end
  // brings a reset back, on which a later write fails.
  const int word = 1;
  const auto deadline = SocketMesh::Clock::now() + std::chrono::seconds(10);
  std::string raised = "nothing";
  for (int i = 0; i < 2000 && raised == "nothing"; ++i) {
    auto send = std::make_shared<SocketMesh::Send>();
    send->key = {SocketMesh::Kind::Message, uint64_t(10 + i)};
    send->parts = {{reinterpret_cast<const char*>(&word), sizeof word}};
    try {
      mesh[1]->post(0, send, deadline);
      mesh[1]->progress([&] { return send->done; }, deadline);
      mesh[1]->raise_failed(0, *send);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    } catch (const CutError& e) {
      CHECK(e.peer() == 0);
      raised = e.reason();
    } catch (const Error& e) {
      raised = std::string("untyped: ") + e.what();
    }
  }
  CHECK(raised == "rank 1 sent what no rank of this build sends");
}

TEST_CASE("a message of another size than the receive's is dropped, and the next one still arrives", "[sockets]") {
  auto store = std::make_shared<HashStore>();
  SocketMesh a(store, 0, 2, loopback(), {}), b(store, 1, 2, loopback(), {});
  const auto deadline = SocketMesh::Clock::now() + std::chrono::seconds(20);
  std::vector<char> big(100000, 'x');
  const int small = 7;
  int into = 0;
  auto first = std::make_shared<SocketMesh::Send>(), second = std::make_shared<SocketMesh::Send>();
  first->key = {SocketMesh::Kind::Message, 1};
  first->parts = {{big.data(), big.size()}};
  second->key = {SocketMesh::Kind::Message, 2};
  second->parts = {{reinterpret_cast<const char*>(&small), sizeof small}};
  auto r1 = std::make_shared<SocketMesh::Recv>(), r2 = std::make_shared<SocketMesh::Recv>();
  r1->key = first->key;
  r1->parts = {{reinterpret_cast<char*>(&into), sizeof into}};
  r2->key = second->key;
  r2->parts = {{reinterpret_cast<char*>(&into), sizeof into}};
  std::thread sender([&] {
    a.post(1, first, deadline);
    a.post(1, second, deadline);
    a.progress([&] { return first->done && second->done; }, deadline);
  });
  b.post(0, r1, deadline);
  b.post(0, r2, deadline);
  b.progress([&] { return r1->done && r2->done; }, deadline);
  sender.join();
  CHECK(r1->differs);
  CHECK(r1->stated == big.size());
  CHECK_FALSE(r2->differs);
  CHECK(into == small);
}

TEST_CASE("more members connecting at once than the strangers' margin, hellos late, are all let in", "[sockets]") {
  // Rank `top` of a group is connected to by each of its lower ranks; they all connect before
  // any says its hello, so the listener accepts them all while none has proved itself yet.
  const int top = int(SocketListener::kMostPending) + 40;
  auto listener = SocketListener::on(loopback());
  const std::string id(pair_auth::kGroupBytes, 'b');
  const std::string key = pair_auth::group_key("the workers' secret", id);
  listener->join(id, top, key);
  const std::string at(reinterpret_cast<const char*>(&listener->address()), listener->address_length());
  std::vector<int> lower;
  for (int r = 0; r < top; ++r) lower.push_back(connect_to(at));
  auto serve_once = [&] {
    std::vector<pollfd> fds;
    listener->watch(fds);
    poll(fds.data(), fds.size(), 50);
    listener->serve(fds.data(), fds.size());
  };
  serve_once();  // accepts the whole burst
  for (int r = 0; r < top; ++r) send_all(lower[size_t(r)], pair_auth::hello(key, id, uint32_t(r), uint32_t(top)));
  std::vector<std::pair<int, int>> in;
  for (const auto until = SocketListener::Clock::now() + std::chrono::seconds(10);
       int(in.size()) < top && SocketListener::Clock::now() < until;) {
    serve_once();
    for (auto& p : listener->take(id, top)) in.push_back(p);
  }
  CHECK(int(in.size()) == top);
  listener->leave(id, top);
  for (auto& [peer, fd] : in) close(fd);
  for (int fd : lower) close(fd);
}

TEST_CASE(
    "messages written together are read together; one whose receive comes later is served from that read, "
    "without a poll",
    "[sockets]") {
  auto store = std::make_shared<HashStore>();
  SocketMesh a(store, 0, 2, loopback(), {}), b(store, 1, 2, loopback(), {});
  const auto deadline = SocketMesh::Clock::now() + std::chrono::seconds(20);
  const int sent[3] = {11, 22, 33};
  int got[3] = {0, 0, 0};
  std::vector<std::shared_ptr<SocketMesh::Send>> sends;
  std::vector<std::shared_ptr<SocketMesh::Recv>> recvs;
  for (int k = 0; k < 3; ++k) {
    sends.push_back(std::make_shared<SocketMesh::Send>());
    sends.back()->key = {SocketMesh::Kind::Message, uint64_t(k)};
    sends.back()->parts = {{reinterpret_cast<const char*>(&sent[k]), sizeof(int)}};
    recvs.push_back(std::make_shared<SocketMesh::Recv>());
    recvs.back()->key = sends.back()->key;
    recvs.back()->parts = {{reinterpret_cast<char*>(&got[k]), sizeof(int)}};
  }
  // All three in one write, in the socket before the receiver looks.
  for (int k = 0; k < 3; ++k) a.post(1, sends[size_t(k)], deadline, k < 2);
  a.progress([&] { return sends[2]->done; }, deadline);
  b.post(0, recvs[0], deadline);
  b.progress([&] { return recvs[0]->done; }, deadline);
  // The other two came in the same read: nothing is left in the socket to wake a poll, and
  // the wait reads them without one.
  b.post(0, recvs[1], deadline);
  b.post(0, recvs[2], deadline);
  const uint64_t polls = b.polls();
  b.progress([&] { return recvs[1]->done && recvs[2]->done; }, SocketMesh::Clock::now() + std::chrono::seconds(2));
  CHECK(b.polls() == polls);
  CHECK(got[0] == 11);
  CHECK(got[1] == 22);
  CHECK(got[2] == 33);
}

TEST_CASE(
    "a passive receive is taken by a wait that reads past its posted receives; a message ahead stays in the socket",
    "[sockets]") {
  // A point-to-point sender's stand for a refusal: its waits look for it, but a message of
  // another kind ahead of it is left in the socket for its own receive (no copy aside).
  auto store = std::make_shared<HashStore>();
  SocketMesh a(store, 0, 2, loopback(), {}), b(store, 1, 2, loopback(), {});
  auto within = [](int ms) { return SocketMesh::Clock::now() + std::chrono::milliseconds(ms); };
  int standing = 0, early = 0;
  const int values[3] = {5, 7, 6};
  auto passive = std::make_shared<SocketMesh::Recv>();
  passive->key = {SocketMesh::Kind::Refusal, 0};
  passive->passive = true;
  passive->parts = {{reinterpret_cast<char*>(&standing), sizeof standing}};
  auto send = [&](SocketMesh::Kind kind, const int& v) {
    auto s = std::make_shared<SocketMesh::Send>();
    s->key = {kind, kind == SocketMesh::Kind::Refusal ? 0u : 9u};
    s->parts = {{reinterpret_cast<const char*>(&v), sizeof v}};
    b.post(0, s, within(20000));
    b.progress([&] { return s->done; }, within(20000));
  };
  a.post(1, passive, within(20000));
  send(SocketMesh::Kind::Refusal, values[0]);
  a.progress([&] { return passive->done; }, within(20000));
  CHECK(standing == 5);

  send(SocketMesh::Kind::Message, values[1]);
  send(SocketMesh::Kind::Refusal, values[2]);
  a.post(1, passive, within(20000));
  CHECK_THROWS_AS(a.progress([&] { return passive->done; }, within(300)), TimeoutError);
  auto message = std::make_shared<SocketMesh::Recv>();
  message->key = {SocketMesh::Kind::Message, 9};
  message->parts = {{reinterpret_cast<char*>(&early), sizeof early}};
  a.post(1, message, within(20000));
  a.progress([&] { return message->done && passive->done; }, within(20000));
  CHECK(early == 7);
  CHECK(standing == 6);
}

TEST_CASE("a connection attempt that is never answered times out by the call's deadline, naming the rank it tried",
          "[sockets]") {
  // The peer's published address is a listener whose accept queue is full (backlog 0, one
  // connection in it that nobody accepts): the kernel drops further connection attempts
  // unanswered, as a host that filters them would.
  const int full = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_storage at = loopback();
  socklen_t len = sizeof(sockaddr_in);
  REQUIRE(bind(full, reinterpret_cast<const sockaddr*>(&at), len) == 0);
  REQUIRE(listen(full, 0) == 0);
  REQUIRE(getsockname(full, reinterpret_cast<sockaddr*>(&at), &len) == 0);
  std::vector<int> queued;  // connections until one is left unanswered
  for (bool answered = true; answered;) {
    REQUIRE(queued.size() < 8);
    queued.push_back(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    const int started = connect(queued.back(), reinterpret_cast<const sockaddr*>(&at), len);
    REQUIRE((started == 0 || errno == EINPROGRESS));
    pollfd p{queued.back(), POLLOUT, 0};
    // The first fills the queue: on a loaded machine its handshake may take a while, and a
    // loop that gave up on it early would leave the queue with room for the mesh's attempt.
    answered = poll(&p, 1, queued.size() == 1 ? 3000 : 300) == 1;
  }
  auto store = std::make_shared<HashStore>();
  SocketMesh a(store, 0, 2, loopback(), {4, 9});  // rank 1 of the group is global rank 9
  store->set("sock/addr/1", std::string(reinterpret_cast<const char*>(&at), len));
  const int x = 1;
  auto out = std::make_shared<SocketMesh::Send>();
  out->key = {SocketMesh::Kind::Message, 1};
  out->parts = {{reinterpret_cast<const char*>(&x), sizeof x}};
  const auto start = SocketMesh::Clock::now();
  const auto deadline = start + std::chrono::milliseconds(500);
  std::vector<int> named;
  std::string what;
  try {
    a.post(1, out, deadline);  // rank 0 is the pair's connector
    a.progress([&] { return out->done; }, deadline);
  } catch (const TimeoutError& e) {
    named = e.ranks();
    what = e.what();
  }
  const auto took = SocketMesh::Clock::now() - start;
  CHECK(named == std::vector<int>{9});
  CHECK_THAT(what, Catch::Contains("connecting to rank 9"));
  CHECK(took >= std::chrono::milliseconds(450));
  CHECK(took < std::chrono::milliseconds(1500));  // the deadline, with room for a loaded machine
  for (int fd : queued) close(fd);
  close(full);
}
