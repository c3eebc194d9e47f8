// The collectives of a group over flat host buffers: GlooBackend chooses one implementation per
// group when the group is made: our algorithms over one path (algorithms.hpp, over shared
// memory or TCP), or the hierarchical composition of such groups across hosts
// (hierarchical_transport.hpp), each behind the one entry point `run`, which takes the
// operation's description (HostOp): a new collective is a new kind of intent and its schedule,
// not a method in every layer. Every call first makes the ranks agree on `intent`
// (backend/intent.hpp): a disagreement is a CollectiveMismatchError on every rank, before a
// byte moves (the eager broadcast on shared memory raises it on the root at its next call).
#pragma once
#include <chrono>
#include <string>

#include "distrun/backend/intent.hpp"
#include "distrun/backend/reduce_kernels.hpp"

namespace distrun {

/// One collective as this layer runs it: what every rank states (its kind says which
/// collective) and this rank's buffers. What each kind reads and writes:
///   all_gather      each rank's intent.bytes at `in`, in rank order, into `out` (size * bytes)
///   gather          as all_gather, on intent.root only (elsewhere `out` may be null)
///   scatter         block `rank` of root's `in` (size blocks of intent.bytes) into `out`
///   broadcast       root's intent.bytes at `out` into every rank's `out`
///   all_reduce      elementwise reduction of every rank's `out` (intent.bytes), in place on every rank
///   reduce          as all_reduce, into root's `out` only (the others' are left as they were)
///   reduce_scatter  block `rank` (intent.bytes) of the reduction of every rank's `in` (size
///                   blocks) into `out`
///   all_to_all      intent.send_bytes[j] at in + intent.send_offset[j] go to rank j; received
///                   blocks land in rank order in `out` (intent.recv_bytes[j] from rank j)
/// The reductions combine elements of `element_size` bytes with `fn`.
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
