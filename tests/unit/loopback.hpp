// The loopback address as a SocketMesh listens on it (port 0: any), for tests of the sockets.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

inline sockaddr_storage loopback() {
  sockaddr_storage a{};
  auto& in = reinterpret_cast<sockaddr_in&>(a);
  in.sin_family = AF_INET;
  in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}
