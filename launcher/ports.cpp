#include "ports.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "distrun/core/error.hpp"

namespace distrun::launcher {
namespace {

// Binds an IPv4 TCP socket on all interfaces; returns the bound port or 0 on failure.
uint16_t try_bind(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw Error(std::string("socket: ") + strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(port);
  uint16_t bound = 0;
  // SO_REUSEADDR as the store servers bind: connections of a previous job in TIME_WAIT do not
  // block them, a live listener does.
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    socklen_t len = sizeof addr;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) bound = ntohs(addr.sin_port);
  }
  close(fd);
  return bound;
}

}  // namespace

uint16_t pick_free_port() {
  uint16_t port = try_bind(0);
  if (port == 0) throw Error("cannot find a free TCP port: " + std::string(strerror(errno)));
  return port;
}

bool port_is_free(uint16_t port) { return try_bind(port) != 0; }

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
  static const char* digits = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : raw) {
    hex += digits[c >> 4];
    hex += digits[c & 15];
  }
  return hex;
}

}  // namespace distrun::launcher
