// A relay in the middle of store connections: it sees every frame a client sends and may
// alter, repeat, hold or drop it (`tamper` says what goes on in its place); the server's frames
// go back unchanged, counted, so a test can tell whether the server answered a frame or closed
// the connection instead. In-process in the unit tests (tests/unit/store/test_auth.cpp), and
// between namespace hosts as distrun-test-frame-relay (frame_relay.cpp).
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <list>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "distrun/store/protocol.hpp"

namespace distrun::test {

/// A connected TCP socket to ip:port, or -1.
inline int connect_to(const std::string& ip, uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (fd < 0 || ::inet_pton(AF_INET, ip.c_str(), &a.sin_addr) != 1 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  return fd;
}

/// One frame's payload from `fd`; false at the end of the stream (or a cut frame).
inline bool read_frame(int fd, std::string& payload) {
  uint8_t hdr[4];
  if (::recv(fd, hdr, 4, MSG_WAITALL) != 4) return false;
  payload.assign(wire::read_u32(hdr), '\0');
  return payload.empty() || ::recv(fd, payload.data(), payload.size(), MSG_WAITALL) == ssize_t(payload.size());
}

inline void send_frame(int fd, const std::string& payload) {
  const std::string f = wire::frame(payload);
  ::send(fd, f.data(), f.size(), MSG_NOSIGNAL);
}

class FrameRelay {
 public:
  /// (connection, index of the frame on it, its payload) -> the payloads sent on in its place.
  /// Connections are numbered in the order the relay reached the server for them.
  using Tamper = std::function<std::vector<std::string>(int conn, int index, const std::string& payload)>;

  /// Listens on listen_ip:listen_port (0: any free port) and relays to server_ip:server_port.
  FrameRelay(const std::string& listen_ip, uint16_t listen_port, std::string server_ip, uint16_t server_port,
             Tamper tamper)
      : server_ip_(std::move(server_ip)), server_port_(server_port), tamper_(std::move(tamper)) {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ::setsockopt(listener_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(listen_port);
    socklen_t len = sizeof a;
    if (::inet_pton(AF_INET, listen_ip.c_str(), &a.sin_addr) != 1 ||
        ::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(listener_, 16) != 0 ||
        ::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      ::close(listener_);
      throw std::runtime_error("relay: cannot listen on " + listen_ip + ":" + std::to_string(listen_port));
    }
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~FrameRelay() {
    stop_ = true;
    ::shutdown(listener_, SHUT_RDWR);
    acceptor_.join();
    for (Link& l : links_) {
      ::shutdown(l.client, SHUT_RDWR);
      ::shutdown(l.server, SHUT_RDWR);
    }
    for (Link& l : links_) {
      l.forth.join();
      l.back.join();
      ::close(l.client);
      ::close(l.server);
    }
    ::close(listener_);
  }
  FrameRelay(const FrameRelay&) = delete;
  FrameRelay& operator=(const FrameRelay&) = delete;

  uint16_t port() const { return port_; }
  /// The server's frames relayed back on connection `conn` so far.
  int replies(int conn) {
    std::lock_guard<std::mutex> l(mu_);
    return conn < int(links_.size()) ? std::next(links_.begin(), conn)->replies.load() : 0;
  }
  /// Whether the server ended connection `conn`.
  bool server_closed(int conn) {
    std::lock_guard<std::mutex> l(mu_);
    return conn < int(links_.size()) && std::next(links_.begin(), conn)->server_closed.load();
  }

 private:
  struct Link {
    int client = -1, server = -1;
    std::atomic<int> replies{0};
    std::atomic<bool> server_closed{false};
    std::thread forth, back;
  };

  void accept_loop() {
    while (!stop_) {
      int client = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        return;
      }
      int server = connect_to(server_ip_, server_port_);
      if (server < 0) {  // the server is not up yet: the client tries again, as with no relay
        ::close(client);
        continue;
      }
      std::lock_guard<std::mutex> l(mu_);
      Link& link = links_.emplace_back();
      link.client = client;
      link.server = server;
      const int conn = int(links_.size()) - 1;
      link.back = std::thread([&link] {
        // Counted before the client sees it: a client that answers a reply finds it counted.
        for (std::string p; read_frame(link.server, p);) {
          ++link.replies;
          send_frame(link.client, p);
        }
        link.server_closed = true;
        ::shutdown(link.client, SHUT_RDWR);
      });
      link.forth = std::thread([this, &link, conn] {
        std::string p;
        for (int i = 0; read_frame(link.client, p); ++i)
          for (const std::string& out : tamper_(conn, i, p)) send_frame(link.server, out);
        ::shutdown(link.server, SHUT_WR);
      });
    }
  }

  std::string server_ip_;
  uint16_t server_port_;
  Tamper tamper_;
  int listener_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::list<Link> links_;  // a list: the threads hold references to their link
  std::thread acceptor_;
};

}  // namespace distrun::test
