// A listening socket handed to the store server by whoever bound it (c10d's masterListenFd):
// the launcher binds MASTER_PORT itself and passes the descriptor to rank 0, so the port
// cannot be taken between "picked" and "bound", and no error text has to be matched to retry.
#pragma once
#include <cstdint>
#include <string>

namespace distrun {

/// The environment variable through which the launcher names rank 0's listening descriptor.
inline constexpr const char* kStoreListenFdEnv = "DISTRUN_STORE_LISTEN_FD";

/// What a validated listening descriptor is bound to.
struct ListeningSocket {
  int fd = -1;
  std::string address;  // numeric, e.g. "127.0.0.1", "0.0.0.0", "::"
  uint16_t port = 0;
  bool ipv6 = false;
};

/// Checks that `fd` is an open, listening TCP (IPv4 or IPv6) stream socket and says where it is
/// bound; ConfigError naming `origin` (e.g. "DISTRUN_STORE_LISTEN_FD=7") and what is wrong.
ListeningSocket inspect_listening_socket(int fd, const std::string& origin);

/// The descriptor named by $DISTRUN_STORE_LISTEN_FD, validated; nullopt-like fd -1 when unset
/// or empty. ConfigError when it is not a number or not a listening TCP socket.
ListeningSocket listening_socket_from_env();

}  // namespace distrun
