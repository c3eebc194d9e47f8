// The socket path's connections: made on first use, only between the pairs that exchange, and
// never with a stranger that lacks the group's token.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "distrun/host/paths/socket_mesh.hpp"
#include "distrun/store/hash_store.hpp"

using namespace distrun;

namespace {

sockaddr_storage loopback() {
  sockaddr_storage a{};
  auto& in = reinterpret_cast<sockaddr_in&>(a);
  in.sin_family = AF_INET;
  in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

}  // namespace

TEST_CASE("a ring opens two connections a rank, and a stranger without the token is dropped", "[sockets]") {
  const int n = 6;
  auto store = std::make_shared<HashStore>();
  std::vector<std::unique_ptr<SocketMesh>> mesh;
  for (int r = 0; r < n; ++r) mesh.push_back(std::make_unique<SocketMesh>(store, r, n, loopback(), std::vector<int>{}));
  // The stranger knows rank 5's address (the store's value) and the hello's form, not the token;
  // it is first in rank 5's accept queue.
  const std::string at = store->get("sock/addr/5");
  const int stranger = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(connect(stranger, reinterpret_cast<const sockaddr*>(at.data()), socklen_t(at.size())) == 0);
  char hello[32] = {};
  const uint64_t magic = 0x64697374736f636bull;
  std::memcpy(hello, &magic, sizeof magic);
  REQUIRE(send(stranger, hello, sizeof hello, 0) == ssize_t(sizeof hello));

  std::vector<int> got(n, -1);
  std::vector<std::string> errors(n);
  std::vector<std::thread> ranks;
  for (int r = 0; r < n; ++r)
    ranks.emplace_back([&, r] {
      try {
        const auto deadline = SocketMesh::Clock::now() + std::chrono::seconds(20);
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
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r);
    CHECK(errors[size_t(r)] == "");
    CHECK(got[size_t(r)] == (r + n - 1) % n);
    CHECK(mesh[size_t(r)]->connections() == 2);
  }
  // Rank 5 closed the stranger's connection: it reads the end, not a byte of the group's.
  pollfd p{stranger, POLLIN, 0};
  REQUIRE(poll(&p, 1, 5000) == 1);
  char byte = 0;
  CHECK(recv(stranger, &byte, 1, 0) == 0);
  close(stranger);
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
