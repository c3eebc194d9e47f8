#include "distrun/store/listen_socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "distrun/core/error.hpp"

namespace distrun {

ListeningSocket inspect_listening_socket(int fd, const std::string& origin) {
  auto bad = [&](const std::string& why) {
    return ConfigError(origin + ": " + why + " (expected a bound, listening TCP socket handed down by the launcher)");
  };
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0) throw bad("descriptor " + std::to_string(fd) + " is not open");
  if (!S_ISSOCK(st.st_mode)) throw bad("descriptor " + std::to_string(fd) + " is not a socket");
  int value = 0;
  socklen_t len = sizeof value;
  if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &value, &len) != 0 || (value != AF_INET && value != AF_INET6))
    throw bad("descriptor " + std::to_string(fd) + " is not an IPv4 or IPv6 socket");
  const bool ipv6 = value == AF_INET6;
  len = sizeof value;
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &value, &len) != 0 || value != SOCK_STREAM)
    throw bad("descriptor " + std::to_string(fd) + " is not a stream (TCP) socket");
  len = sizeof value;
  if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &value, &len) != 0 || value == 0)
    throw bad("socket " + std::to_string(fd) + " is not listening");
  sockaddr_storage ss{};
  len = sizeof ss;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0)
    throw bad(std::string("getsockname: ") + std::strerror(errno));
  ListeningSocket out;
  out.fd = fd;
  out.ipv6 = ipv6;
  char text[INET6_ADDRSTRLEN] = {};
  if (ipv6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(ss);
    inet_ntop(AF_INET6, &a.sin6_addr, text, sizeof text);
    out.port = ntohs(a.sin6_port);
  } else {
    const auto& a = reinterpret_cast<const sockaddr_in&>(ss);
    inet_ntop(AF_INET, &a.sin_addr, text, sizeof text);
    out.port = ntohs(a.sin_port);
  }
  out.address = text;
  return out;
}

ListeningSocket listening_socket_from_env() {
  const char* v = std::getenv(kStoreListenFdEnv);
  if (!v || !*v) return {};
  const std::string origin = std::string(kStoreListenFdEnv) + "=" + v;
  char* end = nullptr;
  errno = 0;
  long fd = std::strtol(v, &end, 10);
  if (errno != 0 || *end != '\0' || fd < 0 || fd > 1 << 24) throw ConfigError(origin + ": not a descriptor number");
  return inspect_listening_socket(int(fd), origin);
}

}  // namespace distrun
