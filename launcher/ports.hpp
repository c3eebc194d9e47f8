// Ports for the workers' store and the agents' rendezvous, and the per-job secret.
#pragma once
#include <cstdint>
#include <string>

namespace distrun::launcher {

/// A TCP socket the agent bound and listens on, held for the whole job so that its port
/// cannot be taken between attempts (c10d's masterListenFd): local rank 0 serves its store on
/// it (DISTRUN_STORE_LISTEN_FD). Close-on-exec; the spawner hands a copy to rank 0 only.
class BoundPort {
 public:
  BoundPort() = default;
  /// Binds `address` (an IP literal; "0.0.0.0" for all) on `port` (0: any free port) and
  /// listens. ConfigError naming the port when it is already in use; Error otherwise.
  BoundPort(const std::string& address, uint16_t port);
  ~BoundPort();
  BoundPort(BoundPort&& other) noexcept;
  BoundPort& operator=(BoundPort&& other) noexcept;
  BoundPort(const BoundPort&) = delete;
  BoundPort& operator=(const BoundPort&) = delete;

  int fd() const { return fd_; }
  uint16_t port() const { return port_; }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

/// A port that was free on `address` a moment ago (bind port 0, read, close). Racy by nature:
/// only for programs that bind MASTER_PORT themselves (they cannot take a descriptor).
uint16_t pick_free_port(const std::string& address = "0.0.0.0");

/// `bytes` random bytes from /dev/urandom as lowercase hex; Error when it cannot be read.
std::string random_hex(size_t bytes);

}  // namespace distrun::launcher
