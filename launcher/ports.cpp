#include "ports.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "distrun/core/error.hpp"
#include "distrun/store/auth.hpp"

namespace distrun::launcher {
namespace {

// An IPv4 or IPv6 socket address for the literal `address`.
sockaddr_storage socket_address(const std::string& address, uint16_t port, socklen_t& len) {
  sockaddr_storage ss{};
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (inet_pton(AF_INET, address.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    len = sizeof *v4;
  } else if (inet_pton(AF_INET6, address.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    len = sizeof *v6;
  } else {
    throw ConfigError("'" + address + "' is not an IP address to bind");
  }
  return ss;
}

// Binds (SO_REUSEADDR as the store servers do: a previous job's connections in TIME_WAIT do
// not block the port, a live listener does); returns the fd, or -1 with errno set.
int bind_socket(const std::string& address, uint16_t port, uint16_t& bound) {
  socklen_t len = 0;
  sockaddr_storage ss = socket_address(address, port, len);
  int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw Error(std::string("socket: ") + strerror(errno));
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  len = sizeof ss;
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  bound = ntohs(ss.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&ss)->sin_port
                                        : reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return fd;
}

}  // namespace

BoundPort::BoundPort(const std::string& address, uint16_t port) {
  fd_ = bind_socket(address, port, port_);
  if (fd_ < 0 && errno == EADDRINUSE)
    throw PortInUse("port " + std::to_string(port) + " on " + address +
                    " is already in use on this host (pick another, or drop the option to use a free one)");
  if (fd_ < 0) throw Error("cannot bind " + address + ":" + std::to_string(port) + ": " + strerror(errno));
  if (listen(fd_, SOMAXCONN) != 0) {
    int e = errno;
    close(fd_);
    fd_ = -1;
    throw Error("cannot listen on " + address + ":" + std::to_string(port) + ": " + strerror(e));
  }
}

BoundPort::~BoundPort() {
  if (fd_ >= 0) close(fd_);
}

BoundPort::BoundPort(BoundPort&& o) noexcept : fd_(std::exchange(o.fd_, -1)), port_(o.port_) {}

BoundPort& BoundPort::operator=(BoundPort&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(o.fd_, -1);
    port_ = o.port_;
  }
  return *this;
}

uint16_t pick_free_port(const std::string& address) {
  uint16_t port = 0;
  int fd = bind_socket(address, 0, port);
  if (fd < 0) throw Error("cannot find a free TCP port on " + address + ": " + strerror(errno));
  close(fd);
  return port;
}

namespace {

std::string to_hex(const std::string& raw) {
  static const char* digits = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : raw) {
    hex += digits[c >> 4];
    hex += digits[c & 15];
  }
  return hex;
}

}  // namespace

std::string random_hex(size_t bytes) {
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(std::string("/dev/urandom: ") + strerror(errno));
  std::string raw(bytes, '\0');
  size_t got = 0;
  while (got < bytes) {
    ssize_t n = read(fd, raw.data() + got, bytes - got);
    if (n <= 0 && errno != EINTR) break;
    if (n > 0) got += size_t(n);
  }
  close(fd);
  if (got < bytes) throw Error("/dev/urandom: short read");
  return to_hex(raw);
}

std::string workers_secret(const std::string& job_secret, const std::string& salt, const std::string& run_id,
                           int attempt) {
  std::string info = "distrun workers' store v1";
  info += '\0' + run_id + '\0' + std::to_string(attempt);
  return to_hex(auth::hkdf(job_secret, salt, info, 32));
}

}  // namespace distrun::launcher
