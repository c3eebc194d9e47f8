// Typed errors of the distrun library. Each message says what failed, with what, and where;
// the apps map the type to an exit code once (see exit_code()).
#pragma once
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace distrun {

/// Base of every error the library throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Bad input: a command line, a scenario file or an environment that cannot be used (exit 2).
class ConfigError : public Error {
 public:
  using Error::Error;
};

/// A problem in the key-value store (connection, protocol, authentication).
class StoreError : public Error {
 public:
  using Error::Error;
};

/// A collective failed in a backend, or a backend lacks an operation.
class BackendError : public Error {
 public:
  using Error::Error;
};

/// A wait ran past its deadline (store keys, collectives, rendezvous).
class TimeoutError : public Error {
 public:
  using Error::Error;
  TimeoutError(const std::string& what, std::vector<int> ranks) : Error(what), ranks_(std::move(ranks)) {}
  /// The global ranks this rank waited on directly and in vain: those whose message or flag
  /// the wait still needed, not necessarily the rank that stalled the group (a ring names its
  /// predecessor). Through the TCP hub, the hub's verdict: the ranks the hub waited on in vain,
  /// the same on every rank. Empty where the wait was on no rank in particular, as a barrier's
  /// count.
  const std::vector<int>& ranks() const { return ranks_; }

 private:
  std::vector<int> ranks_;
};

/// A peer rank died or froze; the message names it.
class PeerError : public BackendError {
 public:
  PeerError(int peer, const std::string& what) : BackendError(what), peer_(peer) {}
  /// The global rank of the lost peer, or -1 when it could not be told.
  int peer() const { return peer_; }

 private:
  int peer_;
};

/// Results differ from the reference (a scenario check failed).
class CheckError : public Error {
 public:
  using Error::Error;
};

/// The documented exit status for an error: 2 for bad input, 1 for anything else.
inline int exit_code(const std::exception& e) { return dynamic_cast<const ConfigError*>(&e) ? 2 : 1; }

}  // namespace distrun
