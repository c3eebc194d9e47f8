// Collectives between processes of one host through a shared segment. Every rank posts its
// intent (and, when its payload is small, the payload itself: one copy into its slot) and
// bumps its sequence flag; once every peer has posted, each rank takes what it needs from the
// peers' slots, or for large payloads straight out of their buffers through cross-memory
// attach (process_vm_readv: one copy, where loopback TCP copies twice through the kernel and
// wakes a thread per segment). A rank whose buffer was read in place waits for its readers'
// done flags before returning; one whose payload went through its slot does not (the slot of
// that parity is reused two collectives later, when every peer has provably moved on). When
// the segment cannot be mapped the ranks meet over Gloo's TCP pairs instead.
// Used by GlooBackend for CPU buffers when every member of the
// group is on this host and the kernel lets them read each other (same user, no ptrace
// restriction); otherwise, or with DISTRUN_TRANSPORT=tcp, Gloo's TCP path is used.
//
// It trusts no peer: "can read" is proven by reading a per-process random nonce (a constant
// would be found in one's own memory by ranks in separate PID namespaces with ASLR off); the
// segment is opened only when it is a sealed memfd of the expected size (no peer can truncate
// it under us: no SIGBUS); and before every collective each rank publishes its Intent
// (backend/intent.hpp: collective, sequence, dtype, op, root, sizes, buffer extent), every
// rank checks all of them, and every read is bounded by the peer's published extent.
#pragma once
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "distrun/gloo/transport.hpp"
#include "distrun/store/store.hpp"

namespace gloo {
class Context;
}

namespace distrun {

// The shared segment: a futex barrier, a doorbell, and per rank its flags, intent rows and
// inline slots (see cma.cpp).
struct CmaShared;
struct CmaBox;

class CmaTransport : public CollectiveTransport {
 public:
  /// Meets the other members through `store` (their pids and boot ids), checks that every one
  /// can read every other's memory, and returns nullptr when not (another host, or refused).
  /// `next_tag` gives the Gloo tags of the small collectives it runs.
  static std::unique_ptr<CmaTransport> create(std::shared_ptr<gloo::Context> context, Store& store, int rank, int size,
                                              std::function<uint32_t()> next_tag, std::vector<int> global_ranks);

  std::string name() const override { return shared_ ? "shm" : "shm/tcp-sync"; }
  /// True when the ranks meet in the shared segment (false: they meet over Gloo's pairs).
  bool meets_in_shared_memory() const { return shared_ != nullptr; }

  /// Why the shared segment behind `fd` must not be mapped for a group of `size` (wrong size,
  /// not a memfd, or not sealed against shrinking), or "" when it may.
  static std::string segment_problem(int fd, int size);
  /// Bytes of the shared segment for a group of `size`.
  static size_t segment_bytes(int size);
  /// Per rank and parity: what a rank may copy into its slot rather than expose its buffer.
  static constexpr size_t kInlineCapacity = size_t(64) << 10;

  /// Every collective below first publishes `intent` (this rank's view: kind, seq, dtype, op,
  /// root, bytes; the transport adds the buffer's address and extent) and checks everyone's
  /// (CollectiveMismatchError on every rank when they disagree) before reading anything.

  /// Each rank's intent.bytes at `in`, in rank order, into `out` (size * bytes).
  void all_gather(Intent intent, const void* in, void* out, std::chrono::milliseconds timeout) override;
  /// As all_gather, on intent.root only.
  void gather(Intent intent, const void* in, void* out, std::chrono::milliseconds timeout) override;
  /// Block `rank` of root's `in` (size blocks of intent.bytes) into `out`.
  void scatter(Intent intent, const void* in, void* out, std::chrono::milliseconds timeout) override;
  /// Root's intent.bytes at `data` into every rank's `data`.
  void broadcast(Intent intent, void* data, std::chrono::milliseconds timeout) override;
  /// Elementwise reduction of every rank's `data` (intent.bytes), in place on every rank.
  void all_reduce(Intent intent, void* data, size_t element_size, ReduceFn fn, std::chrono::milliseconds timeout) override;
  /// As all_reduce, into root's `data` only (the others' are left as they were).
  void reduce(Intent intent, void* data, size_t element_size, ReduceFn fn, std::chrono::milliseconds timeout) override;
  /// Block `rank` (intent.bytes) of the reduction of every rank's `in` (size blocks) into `out`.
  void reduce_scatter(Intent intent, const void* in, void* out, size_t element_size, ReduceFn fn,
                      std::chrono::milliseconds timeout) override;
  /// intent.send_bytes[j] at in + intent.send_offset[j] go to rank j; received blocks land in
  /// rank order in `out` (intent.recv_bytes[j] from rank j).
  void all_to_all(Intent intent, const void* in, void* out, std::chrono::milliseconds timeout) override;

 private:
  CmaTransport(std::shared_ptr<gloo::Context> context, int rank, int size, std::vector<pid_t> pids,
               std::function<uint32_t()> next_tag, std::vector<int> global_ranks);
  // Maps the segment rank 0 creates (a memfd, opened by the others through /proc/PID/fd/N:
  // no name to leave behind); false when some rank cannot, and then all use Gloo to meet.
  bool map_shared(Store& store);
  // Waits until generation moves past `seen`; checks that the peers are alive meanwhile.
  void wait_generation(uint32_t seen, std::chrono::milliseconds timeout);
  // Publishes `intent` with `base` and its extent, and returns every rank's once all agree.
  // The table lives in the transport and is reused: no allocation per collective.
  const std::vector<Intent>& exchange(Intent intent, const void* base, std::chrono::milliseconds timeout);
  // `bytes` at `offset` in `peer`'s buffer; never past the extent it published.
  void read(int peer, const Intent& of, uint64_t offset, void* dst, size_t bytes);
  // Where those bytes lie in the peer's slot of this collective, or nullptr when not inlined.
  const char* view(int peer, const Intent& of, uint64_t offset, size_t bytes) const;
  // Marks this collective done here; with `buffer_read_in_place`, waits until every peer is
  // done too, since they read our buffer itself.
  void finish(bool buffer_read_in_place, std::chrono::milliseconds timeout);
  // Wakes sleepers after a post or done.
  void ring();
  // Until ready(r) for every peer r: a short spin, yields for up to 200 us, then the futex on the bell.
  template <typename Ready>
  void wait_all(Ready ready, std::chrono::milliseconds timeout, const char* what);
  CmaBox* box(int r) const;
  uint64_t* row(int r, uint64_t seq) const;
  char* slot(int r, uint64_t seq) const;
  // Every rank's `bytes` (ours from `in`, the peers' from their buffers) into `out` in rank order.
  void collect(const std::vector<Intent>& table, const void* in, void* out, size_t bytes);
  void barrier(std::chrono::milliseconds timeout);

  std::shared_ptr<gloo::Context> context_;
  int rank_, size_;
  std::vector<pid_t> pids_;
  std::function<uint32_t()> next_tag_;
  std::vector<int> global_ranks_;
  std::vector<char> scratch_;
  std::vector<Intent> table_;  // every rank's intent in the current collective
  uint64_t seq_ = 0;  // collectives run, the same count on every member
  size_t inline_limit_ = kInlineCapacity;
  CmaShared* shared_ = nullptr;  // mapped segment, or nullptr: meet over Gloo instead
  size_t shared_bytes_ = 0;
  int shared_fd_ = -1;

 public:
  ~CmaTransport();
  CmaTransport(const CmaTransport&) = delete;
  CmaTransport& operator=(const CmaTransport&) = delete;
};

}  // namespace distrun
