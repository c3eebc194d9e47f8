// The path between processes of one host, through a shared segment (see path.hpp for the
// model). Every rank posts its intent (and, when what it exposes is small, the bytes
// themselves: one copy into its slot) and bumps its sequence flag; once every peer has posted,
// each rank takes its pieces from the peers' slots, or for large ones straight out of their
// buffers through cross-memory attach (process_vm_readv: one copy, where loopback TCP copies
// twice through the kernel and wakes a thread per segment). A rank whose buffer was read in
// place waits for its readers' done flags before returning; one whose bytes went through its
// slot does not (the slot of that parity is reused two collectives later, when every peer has
// provably moved on). When the segment cannot be mapped the ranks meet over Gloo's TCP pairs
// instead. Used by GlooBackend for CPU buffers when every member of the group is on this host
// and the kernel lets them read each other (same user, no ptrace restriction); otherwise, or
// with DISTRUN_TRANSPORT=tcp, the TCP path is used.
//
// It trusts no peer: "can read" is proven by reading a per-process random nonce (a constant
// would be found in one's own memory by ranks in separate PID namespaces with ASLR off); the
// segment is opened only when it is a sealed memfd of the expected size (no peer can truncate
// it under us: no SIGBUS); and before every collective each rank publishes its Intent
// (backend/intent.hpp: collective, sequence, dtype, op, root, sizes, buffer extent), every
// rank checks all of them, and every read is bounded by the peer's published extent.
//
// A broadcast of up to kEagerBytes (and the inline limit) does not meet: every rank writes its
// intent into the next entry of its own ring of kEagerDepth, the root with the payload, and
// the root returns at once; a receiver waits for the root's entry, checks the root's intent
// against its own and copies. So the root runs up to kEagerDepth broadcasts ahead of its
// slowest receiver (it waits only when its ring is full), as Open MPI's eager broadcast does.
// The agreement promise holds with another timing: a rank that sees a disagreement (a
// receiver against its root's entry, two ranks claiming the root, a rank that meets against
// a peer's eager entry) raises CollectiveMismatchError at that call and marks the group
// broken; every rank then raises CollectiveMismatchError, naming that rank and broadcast, at
// its first collective on the group that starts (or is waiting) after the mark, before any
// byte of it moves, and at every later one: the root, which returned, at its next collective
// at the latest when that one waits for the receiver (every collective but an eager broadcast
// whose ring has room). Gloo's barrier and the group's teardown do not check the mark.
#pragma once
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "distrun/host/path.hpp"
#include "distrun/store/store.hpp"

namespace gloo {
class Context;
}

namespace distrun {

// The shared segment: a futex barrier, a doorbell, per rank its flags, intent rows, inline
// slots and eager ring, and the group's broken mark (see shm_path.cpp).
struct ShmSegment;
struct RankBox;
struct ShmMark;

class ShmPath : public Path {
 public:
  /// Meets the other members through `store` (their pids and boot ids), checks that every one
  /// can read every other's memory, and returns nullptr when not (another host, or refused).
  /// `next_tag` gives the Gloo tags of the meetings it holds over TCP when no segment maps;
  /// `inline_limit` (at most kInlineCapacity) is the largest payload copied into a slot.
  static std::unique_ptr<ShmPath> create(std::shared_ptr<gloo::Context> context, Store& store, int rank, int size,
                                         std::function<uint32_t()> next_tag, std::vector<int> global_ranks,
                                         size_t inline_limit);

  std::string name() const override { return shared_ ? "shm" : "shm/tcp-sync"; }
  bool reads_peers() const override { return true; }

  /// Why the shared segment behind `fd` must not be mapped for a group of `size` (wrong size,
  /// not a memfd, or not sealed against shrinking), or "" when it may.
  static std::string segment_problem(int fd, int size);
  /// Bytes of the shared segment for a group of `size`.
  static size_t segment_bytes(int size);
  /// Per rank and parity: what a rank may copy into its slot rather than expose its buffer.
  static constexpr size_t kInlineCapacity = size_t(64) << 10;
  /// The eager broadcast: the largest payload, and the broadcasts a root may run ahead (each
  /// time the ring fills while a receiver is off its core, the root waits for it to be
  /// scheduled again: beside busy loops 32 entries measured 57.8 us per 8-byte call, 512 35.4).
  static constexpr size_t kEagerBytes = kEagerBroadcastBytes;
  static constexpr uint64_t kEagerDepth = 512;

  /// Publishes the intent with the exposed buffer's address and extent (and, when the extent
  /// fits the inline limit, the bytes themselves, into this rank's slot), checks everyone's.
  const std::vector<Intent>& meet(Intent intent, const void* base, uint64_t extent,
                                  std::chrono::milliseconds timeout) override;
  /// Phase 0 takes inlined pieces from the peers' slots, every later phase (after a barrier:
  /// the peers have finished the one before) from their buffers themselves.
  void run(Schedule& schedule, int phase, std::chrono::milliseconds timeout) override;
  void finish(std::chrono::milliseconds timeout) override;
  /// Through the rings when the segment is mapped and intent.bytes is at most kEagerBytes and
  /// the inline limit (the same verdict on every rank that agrees with the root).
  bool broadcast_eager(const Intent& intent, void* data, std::chrono::milliseconds timeout) override;

 private:
  ShmPath(std::shared_ptr<gloo::Context> context, int rank, int size, std::vector<pid_t> pids,
          std::function<uint32_t()> next_tag, std::vector<int> global_ranks, size_t inline_limit);
  // Maps the segment rank 0 creates (a memfd, opened by the others through /proc/PID/fd/N:
  // no name to leave behind); false when some rank cannot, and then all use Gloo to meet.
  bool map_shared(Store& store);
  // Waits until generation moves past `seen`; checks that the peers are alive meanwhile.
  void wait_generation(uint32_t seen, std::chrono::milliseconds timeout);
  // `bytes` at `offset` in `peer`'s buffer; never past the extent it published.
  void read(int peer, const Intent& of, uint64_t offset, void* dst, size_t bytes);
  // Where those bytes lie in the peer's slot of this collective, or nullptr when not inlined
  // (or when the phase must see the buffer itself).
  const char* view(int peer, const Intent& of, uint64_t offset, size_t bytes) const;
  // Wakes sleepers after a post or done.
  void ring();
  // Polls until `done()` for up to kPollBudget (shm_path.cpp), or until no peer waited for
  // has shown a new pulse (it polls: it is on a CPU) for peer_still_limit(); true when done.
  // `awaited(r)`: whether peer r is still waited for (one queued behind us on this CPU is
  // yielded to).
  template <typename Done, typename Awaited>
  bool poll(Done done, Awaited awaited);
  // Until ready(r) for every peer r: poll(), then the futex on the bell.
  template <typename Ready>
  void wait_all(Ready ready, std::chrono::milliseconds timeout, const char* what);
  // Who a wait found late (global ranks; none where it waits for a count, as the barrier's)
  // and what it waited for, as a TimeoutError says.
  struct Late {
    std::vector<int> ranks;
    std::string what;
  };
  // Sleeps on the futex `word` until done(), waking every 100 ms to check the deadline (a
  // TimeoutError built from late()) and that every peer's process still exists. `counted`:
  // the sleeper counts itself in `sleepers`, so that ring() knows to wake the bell.
  template <typename Done, typename Waited>
  void sleep_on(std::atomic<uint32_t>& word, Done done, bool counted, std::chrono::milliseconds timeout, Waited late);
  int global(int r) const { return global_rank_of(global_ranks_, r); }
  RankBox* box(int r) const;
  uint64_t* row(int r, uint64_t seq) const;
  char* slot(int r, uint64_t seq) const;
  void barrier(std::chrono::milliseconds timeout);
  // Rank r's entry for collective `seq` in its eager ring: the collective it holds (0: none
  // yet), the intent, the payload.
  std::atomic<uint64_t>& entry_seq(int r, uint64_t seq) const;
  uint64_t* entry_row(int r, uint64_t seq) const;
  char* entry_payload(int r, uint64_t seq) const;
  // Whether rank r has stated its intent for collective `seq` (in its row or its ring); once
  // it has, that intent into `into`, true when it is in the ring (an eager broadcast).
  bool arrived(int r, uint64_t seq) const;
  bool stated(int r, uint64_t seq, Intent& into) const;
  // A disagreement on an eager broadcast: marks the group broken (the first mark stays) and
  // throws `error`. check_broken() throws once a mark at or before the current collective is
  // set; broken() tells whether one is.
  [[noreturn]] void break_group(const CollectiveMismatchError& error);
  ShmMark* mark() const;
  bool broken() const;
  void check_broken() const;

  std::shared_ptr<gloo::Context> context_;
  int rank_, size_;
  std::vector<pid_t> pids_;
  std::function<uint32_t()> next_tag_;
  std::vector<int> global_ranks_;
  std::vector<char> scratch_;     // a piece folded in parts passes through it, when not inlined
  std::vector<Intent> table_;     // every rank's intent in the current collective
  uint64_t seq_ = 0;              // collectives run, the same count on every member
  int phase_ = 0;                 // the last phase run in the current collective
  size_t inline_limit_;           // payloads up to this go through the slot (DISTRUN_SHM_INLINE_BYTES)
  std::vector<uint32_t> pulses_;  // each peer's pulse as last seen by poll()
  ShmSegment* shared_ = nullptr;  // mapped segment, or nullptr: meet over Gloo instead
  size_t shared_bytes_ = 0;
  int shared_fd_ = -1;

 public:
  ~ShmPath() override;
  ShmPath(const ShmPath&) = delete;
  ShmPath& operator=(const ShmPath&) = delete;
};

}  // namespace distrun
