// What an NCCL error needs to name who failed: the heartbeats and the communicator's members.
// Shared by a backend and the Works of its operations, so that a Work waited for after its
// backend is gone still raises the same PeerError/TimeoutError/BackendError.
#pragma once
#include <exception>
#include <memory>
#include <vector>

#include "distrun/backend/liveness.hpp"

namespace distrun::nccl {

struct FailureNamer {
  std::shared_ptr<Liveness> liveness;  // may be null: no heartbeats, no peer named
  std::vector<int> members;            // global ranks of the communicator
  int global_rank = 0;                 // this rank

  /// Throws "rank R: nccl OP failed[: <lost peer>] [what]": PeerError when the heartbeats name a
  /// lost member, else TimeoutError for a timeout, else BackendError. A PeerError is rethrown.
  [[noreturn]] void raise(const char* op, const std::exception& e) const;
};

}  // namespace distrun::nccl
