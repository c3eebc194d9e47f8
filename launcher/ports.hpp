// Ports for the workers' store and the agents' rendezvous, and the workers' secret.
#pragma once
#include <cstdint>
#include <string>

#include "distrun/core/error.hpp"

namespace distrun::launcher {

/// The port asked for is bound already on that address (EADDRINUSE), said as a fact so that
/// a caller that may share it (elastic agents on one host) can act on it.
class PortInUse : public ConfigError {
 public:
  using ConfigError::ConfigError;
};

/// A TCP socket the agent bound and listens on, held for the whole job so that its port
/// cannot be taken between attempts (c10d's masterListenFd): local rank 0 serves its store on
/// it (DISTRUN_STORE_LISTEN_FD). Close-on-exec; the spawner hands a copy to rank 0 only.
class BoundPort {
 public:
  BoundPort() = default;
  /// Binds `address` (an IP literal; "0.0.0.0" for all) on `port` (0: any free port) and
  /// listens. PortInUse (a ConfigError) naming the port when it is already in use; Error otherwise.
  BoundPort(const std::string& address, uint16_t port);
  ~BoundPort();
  BoundPort(BoundPort&& other) noexcept;
  BoundPort& operator=(BoundPort&& other) noexcept;
  BoundPort(const BoundPort&) = delete;
  BoundPort& operator=(const BoundPort&) = delete;

  int fd() const { return fd_; }
  /// Gives the socket away (to a store server that then owns it); this object holds nothing.
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
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

/// The workers' store secret of one attempt with several nodes, as hex: HKDF-SHA256 of the
/// job secret, with node 0's fresh `salt` (published in the plan) and the run id and attempt as
/// context. Every node derives the same one, so it never crosses the wire, and it is new for
/// each attempt; a worker's secret tells nothing about the job secret.
std::string workers_secret(const std::string& job_secret, const std::string& salt, const std::string& run_id,
                           int attempt);

}  // namespace distrun::launcher
