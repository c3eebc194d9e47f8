// The collectives of a group over flat host buffers: GlooBackend chooses one implementation per
// group when the group is made: our algorithms over one path (algorithms.hpp, over shared
// memory or TCP), or the hierarchical composition of such groups across hosts
// (hierarchical_transport.hpp). Every call first makes the ranks agree on `intent`
// (backend/intent.hpp): a disagreement is a CollectiveMismatchError on every rank, before a
// byte moves.
#pragma once
#include <chrono>
#include <string>

#include "distrun/backend/intent.hpp"
#include "distrun/backend/reduce_kernels.hpp"

namespace distrun {

class CollectiveTransport {
 public:
  virtual ~CollectiveTransport() = default;
  /// "shm", "shm/tcp-sync", "tcp" or "hierarchical(...)": for logs and benchmark provenance.
  virtual std::string name() const = 0;

  /// Each rank's intent.bytes at `in`, in rank order, into `out` (size * bytes).
  virtual void all_gather(Intent intent, const void* in, void* out, std::chrono::milliseconds timeout) = 0;
  /// As all_gather, on intent.root only.
  virtual void gather(Intent intent, const void* in, void* out, std::chrono::milliseconds timeout) = 0;
  /// Block `rank` of root's `in` (size blocks of intent.bytes) into `out`.
  virtual void scatter(Intent intent, const void* in, void* out, std::chrono::milliseconds timeout) = 0;
  /// Root's intent.bytes at `data` into every rank's `data`.
  virtual void broadcast(Intent intent, void* data, std::chrono::milliseconds timeout) = 0;
  /// Elementwise reduction of every rank's `data` (intent.bytes), in place on every rank.
  virtual void all_reduce(Intent intent, void* data, size_t element_size, ReduceFn fn,
                          std::chrono::milliseconds timeout) = 0;
  /// As all_reduce, into root's `data` only (the others' are left as they were).
  virtual void reduce(Intent intent, void* data, size_t element_size, ReduceFn fn,
                      std::chrono::milliseconds timeout) = 0;
  /// Block `rank` (intent.bytes) of the reduction of every rank's `in` (size blocks) into `out`.
  virtual void reduce_scatter(Intent intent, const void* in, void* out, size_t element_size, ReduceFn fn,
                              std::chrono::milliseconds timeout) = 0;
  /// intent.send_bytes[j] at in + intent.send_offset[j] go to rank j; received blocks land in
  /// rank order in `out` (intent.recv_bytes[j] from rank j).
  virtual void all_to_all(Intent intent, const void* in, void* out, std::chrono::milliseconds timeout) = 0;
};

}  // namespace distrun
