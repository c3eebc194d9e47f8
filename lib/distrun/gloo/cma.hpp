// Single-copy collectives between processes of one host, through cross-memory attach
// (process_vm_readv): each rank reads what it needs straight out of its peers' buffers, after
// one small all_gather of buffer addresses, and a barrier keeps every buffer alive until all
// reads are done. Loopback TCP copies every byte twice through the kernel and wakes a thread
// per segment; this copies once, which is how MPI's shared-memory transport beats Gloo on one
// host (docs/performance.md). The ranks meet through a small shared-memory segment (an
// address table and a futex barrier; Gloo's TCP pairs when it cannot be mapped), so a
// collective costs microseconds of synchronisation, not thread wake-ups per TCP message.
// Used by GlooBackend for CPU buffers when every member of the
// group is on this host and the kernel lets them read each other (same user, no ptrace
// restriction); otherwise, or with DISTRUN_CMA=0, Gloo's TCP path is used.
#pragma once
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "distrun/backend/reduce_kernels.hpp"
#include "distrun/store/store.hpp"

namespace gloo {
class Context;
}

namespace distrun {

// The shared segment: a futex barrier and the address table (see cma.cpp).
struct CmaShared;

class CmaTransport {
 public:
  /// Meets the other members through `store` (their pids and boot ids), checks that every one
  /// can read every other's memory, and returns nullptr when not (another host, or refused).
  /// `next_tag` gives the Gloo tags of the small collectives it runs.
  static std::unique_ptr<CmaTransport> create(std::shared_ptr<gloo::Context> context, Store& store, int rank, int size,
                                              std::function<uint32_t()> next_tag);

  /// Each rank's `bytes` at `in`, in rank order, into `out` (size * bytes).
  void all_gather(const void* in, void* out, size_t bytes, std::chrono::milliseconds timeout);
  /// As all_gather, on `root` only.
  void gather(const void* in, void* out, size_t bytes, int root, std::chrono::milliseconds timeout);
  /// Block `rank` of root's `in` (size blocks of `bytes`) into `out`.
  void scatter(const void* in, void* out, size_t bytes, int root, std::chrono::milliseconds timeout);
  /// Root's `bytes` at `data` into every rank's `data`.
  void broadcast(void* data, size_t bytes, int root, std::chrono::milliseconds timeout);
  /// Elementwise reduction of every rank's `data` (count elements), in place on every rank.
  void all_reduce(void* data, size_t count, size_t element_size, ReduceFn fn, std::chrono::milliseconds timeout);
  /// As all_reduce, into root's `data` only (the others' are left as they were).
  void reduce(void* data, size_t count, size_t element_size, ReduceFn fn, int root, std::chrono::milliseconds timeout);
  /// Block `rank` of the reduction of every rank's `in` (size blocks of `bytes`) into `out`.
  void reduce_scatter(const void* in, void* out, size_t bytes, size_t element_size, ReduceFn fn,
                      std::chrono::milliseconds timeout);
  /// Bytes send_bytes[j] at in + send_offset[j] go to rank j; received blocks land in rank
  /// order in `out` (recv_bytes[j] from rank j).
  void all_to_all(const void* in, void* out, const std::vector<size_t>& send_offset, const std::vector<size_t>& recv_bytes,
                  std::chrono::milliseconds timeout);

 private:
  CmaTransport(std::shared_ptr<gloo::Context> context, int rank, int size, std::vector<pid_t> pids,
               std::function<uint32_t()> next_tag);
  // Maps the segment rank 0 creates (a memfd, opened by the others through /proc/PID/fd/N:
  // no name to leave behind); false when some rank cannot, and then all use Gloo to meet.
  bool map_shared(Store& store);
  // Waits until generation moves past `seen`; checks that the peers are alive meanwhile.
  void wait_generation(uint32_t seen, std::chrono::milliseconds timeout);
  // Every rank's base address and per-destination offsets (an all_gather of n+1 words).
  std::vector<std::vector<uint64_t>> exchange(const void* base, const std::vector<uint64_t>& offsets,
                                              std::chrono::milliseconds timeout);
  void read(int peer, uint64_t address, void* dst, size_t bytes);
  // Every rank's `bytes` (ours from `in`, the peers' from their buffers) into `out` in rank order.
  void collect(const std::vector<std::vector<uint64_t>>& table, const void* in, void* out, size_t bytes);
  void barrier(std::chrono::milliseconds timeout);

  std::shared_ptr<gloo::Context> context_;
  int rank_, size_;
  std::vector<pid_t> pids_;
  std::function<uint32_t()> next_tag_;
  std::vector<char> scratch_;
  CmaShared* shared_ = nullptr;  // mapped segment, or nullptr: meet over Gloo instead
  size_t shared_bytes_ = 0;
  int shared_fd_ = -1;

 public:
  ~CmaTransport();
  CmaTransport(const CmaTransport&) = delete;
  CmaTransport& operator=(const CmaTransport&) = delete;
};

}  // namespace distrun
