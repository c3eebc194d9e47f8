// The collectives of a group over flat host buffers: GlooBackend chooses one implementation per
// group when the group is made: our algorithms over one path (algorithms.hpp, over shared
// memory or TCP), or the hierarchical composition of such groups across hosts
// (hierarchical_transport.hpp), each behind the one entry point `run`, which takes the
// operation's description (HostOp): a new collective is a new kind of intent and its schedule,
// not a method in every layer. Every call first makes the ranks agree on `intent`
// (backend/intent.hpp): a disagreement is a CollectiveMismatchError on every rank, before a
// byte moves (the eager broadcast, on shared memory and between two ranks over the sockets,
// raises it on the root at its next call that reads a peer).
#pragma once
#include <chrono>
#include <string>

#include "distrun/backend/intent.hpp"
#include "distrun/backend/reduce_kernels.hpp"

namespace distrun {

/// One collective as this layer runs it: what every rank states (its kind says which
/// collective) and this rank's buffers, `in` and `out` as the kind's form says
/// (backend/op.hpp's Buffers; intent.bytes is one block, and all_to_all's blocks are
/// intent.send_bytes at intent.send_offset and intent.recv_bytes in rank order). What each kind
/// reads and writes is said beside its schedule, in algorithms.cpp. The reductions combine
/// elements of `element_size` bytes with `fn`.
struct HostOp {
  Intent intent;
  const void* in = nullptr;
  void* out = nullptr;
  size_t element_size = 0;
  ReduceFn fn = nullptr;
};

class CollectiveTransport {
 public:
  virtual ~CollectiveTransport() = default;
  /// "shm", "shm/tcp-sync", "tcp" or "hierarchical(...)": for logs and benchmark provenance.
  virtual std::string name() const = 0;
  /// Runs `op` with the group: every rank calls it for the same collective, in the same order.
  virtual void run(const HostOp& op, std::chrono::milliseconds timeout) = 0;
};

}  // namespace distrun
