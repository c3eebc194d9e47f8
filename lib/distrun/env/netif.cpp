#include "distrun/env/netif.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "distrun/core/error.hpp"

namespace distrun {

namespace {

struct AddrInfo {
  addrinfo* head = nullptr;
  ~AddrInfo() {
    if (head) freeaddrinfo(head);
  }
};

std::string to_string(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof buf);
  else if (sa->sa_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, buf, sizeof buf);
  return buf;
}

void resolve(const std::string& host, AddrInfo& ai) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  int rc = getaddrinfo(host.c_str(), "9", &hints, &ai.head);
  if (rc != 0 || !ai.head) throw ConfigError("cannot resolve host '" + host + "': " + gai_strerror(rc));
}

}  // namespace

std::string resolve_host(const std::string& host) {
  AddrInfo ai;
  resolve(host, ai);
  // Prefer IPv4, as Gloo and torch do by default.
  for (auto* p = ai.head; p; p = p->ai_next)
    if (p->ai_family == AF_INET) return to_string(p->ai_addr);
  return to_string(ai.head->ai_addr);
}

std::string local_address_towards(const std::string& host) {
  AddrInfo ai;
  resolve(host, ai);
  std::string last = "no address";
  for (auto* p = ai.head; p; p = p->ai_next) {
    // A connected UDP socket sends nothing; it only asks the kernel for the route's source.
    int fd = ::socket(p->ai_family, SOCK_DGRAM, 0);
    if (fd < 0) continue;
    if (::connect(fd, p->ai_addr, p->ai_addrlen) == 0) {
      sockaddr_storage local{};
      socklen_t len = sizeof local;
      if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
        ::close(fd);
        return to_string(reinterpret_cast<sockaddr*>(&local));
      }
    }
    last = std::strerror(errno);
    ::close(fd);
  }
  throw ConfigError("no route to host '" + host + "': " + last);
}

bool is_local_address(const std::string& addr) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  bool found = false;
  for (auto* p = list; p && !found; p = p->ifa_next)
    if (p->ifa_addr && (p->ifa_addr->sa_family == AF_INET || p->ifa_addr->sa_family == AF_INET6))
      found = to_string(p->ifa_addr) == addr;
  freeifaddrs(list);
  return found;
}

std::string interface_with_address(const std::string& addr) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string name;
  for (auto* p = list; p && name.empty(); p = p->ifa_next)
    if (p->ifa_addr && (p->ifa_addr->sa_family == AF_INET || p->ifa_addr->sa_family == AF_INET6) &&
        to_string(p->ifa_addr) == addr)
      name = p->ifa_name;
  freeifaddrs(list);
  return name;
}

}  // namespace distrun
