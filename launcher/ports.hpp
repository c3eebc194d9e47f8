// Ports for the workers' store and the agents' rendezvous, and the per-job secret.
#pragma once
#include <cstdint>
#include <string>

namespace distrun::launcher {

/// A port that was free a moment ago (bind port 0 on all interfaces, read, close). Racy by
/// nature: the supervisor retries when the workers' rank 0 reports the port taken.
uint16_t pick_free_port();

/// True when `port` can be bound on all interfaces right now.
bool port_is_free(uint16_t port);

/// `bytes` random bytes from /dev/urandom as lowercase hex; Error when it cannot be read.
std::string random_hex(size_t bytes);

}  // namespace distrun::launcher
