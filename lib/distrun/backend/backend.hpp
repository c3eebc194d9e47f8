// The Backend interface: one entry point, run(), for every collective (its description in
// op.hpp), and point to point, over flat contiguous buffers whose per-rank blocks follow rank
// order (what "along dim 0" means); torch's collectives are thin helpers over run(). Splitting
// along other dimensions, and object collectives, are built on top in comm/. Implementations:
// GlooBackend (CPU, TCP) and NcclBackend (CUDA); RecordingBackend records what it forwards.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "distrun/backend/liveness.hpp"
#include "distrun/backend/op.hpp"
#include "distrun/backend/types.hpp"
#include "distrun/core/tensor.hpp"

namespace distrun {

/// An operation in flight (isend/irecv), as c10d's Work.
class Work {
 public:
  virtual ~Work() = default;
  /// Blocks until done; throws the operation's error (TimeoutError after `timeout`, 0 = default).
  virtual void wait(std::chrono::milliseconds timeout = std::chrono::milliseconds(0)) = 0;
  /// True once wait() would return at once.
  virtual bool is_completed() = 0;
};

/// Rethrows a failure of `op` by `global_rank` among `members` (global ranks) as a distrun error
/// naming the op and the rank: a PeerError when `liveness` (may be null) names a lost member; a
/// TimeoutError when `e` is one; PeerError and CollectiveMismatchError pass unchanged (they
/// already say everything); anything else is a BackendError. Free, so that what outlives a
/// backend (an NCCL Work) raises exactly what the backend would.
[[noreturn]] void raise_collective_failure(const std::shared_ptr<Liveness>& liveness, const std::vector<int>& members,
                                           int global_rank, const std::string& op, const std::exception& e);

class Backend {
 public:
  virtual ~Backend() = default;

  /// "gloo" or "nccl".
  virtual std::string name() const = 0;
  /// The path this group's data takes (e.g. "shm", "tcp"), chosen once when the group was
  /// made: for logs and benchmark provenance.
  virtual std::string transport_name() const { return name(); }
  /// Where this backend's tensors live (the CPU for Gloo, the rank's GPU for NCCL): helpers
  /// that make their own buffers, such as the object collectives, allocate them there.
  virtual Device tensor_device() const { return Device::cpu(); }
  /// This process's rank within the group, and the group's size.
  int rank() const { return rank_; }
  int size() const { return size_; }
  /// The global rank of group rank `r` (for messages and for mapping src/dst).
  int global_rank(int r) const { return global_rank_of(global_ranks_, r); }
  /// Group rank of global rank `g`, or -1 when `g` is not a member.
  int group_rank(int g) const;
  const std::vector<int>& global_ranks() const { return global_ranks_; }

  /// Runs `op` with the group: every member calls it for the same collective, in the same
  /// order. The one entry point of every collective: each backend reads the kind's form
  /// (op.hpp) and dispatches by its kind; the base class throws "backend X does not support Y".
  virtual void run(const CollectiveOp& op);

  // The collectives in torch's shape, each one run() of its kind.
  /// Root's tensor into every rank's `tensor`.
  void broadcast(Tensor& tensor, const BroadcastOptions& opts);
  /// Elementwise reduction over ranks, in place.
  void all_reduce(Tensor& tensor, const AllreduceOptions& opts);
  /// all_reduce of many tensors packed into buckets (fewer, larger messages); all must share a dtype.
  void all_reduce_coalesced(std::vector<Tensor>& tensors, const AllreduceCoalescedOptions& opts);
  /// Reduction into `tensor` on root; other ranks' tensors are left unspecified.
  void reduce(Tensor& tensor, const ReduceOptions& opts);
  /// Every rank's `in`, concatenated in rank order into `out` (size() * in.numel() elements).
  void all_gather(const Tensor& in, Tensor& out, const AllgatherOptions& opts);
  /// As all_gather, into `out` on root only (ignored elsewhere).
  void gather(const Tensor& in, Tensor& out, const GatherOptions& opts);
  /// Block r of root's `in` (size() equal blocks) into rank r's `out`; `in` is ignored off root.
  void scatter(const Tensor& in, Tensor& out, const ScatterOptions& opts);
  /// Block `rank` of the elementwise reduction of every rank's `in` into `out`.
  void reduce_scatter(const Tensor& in, Tensor& out, const ReduceScatterOptions& opts);
  /// Block j of `in` to rank j; `out` is the received blocks in rank order (counts in opts).
  void all_to_all(const Tensor& in, Tensor& out, const AllToAllOptions& opts);
  /// Returns when every rank has entered.
  void barrier(const BarrierOptions& opts);

  /// Point to point, returning at once; ranks are group ranks; the tensor must outlive wait().
  virtual std::shared_ptr<Work> isend(const Tensor& tensor, int dst, const SendOptions& opts);
  virtual std::shared_ptr<Work> irecv(Tensor& tensor, int src, const SendOptions& opts);
  /// Point to point, blocking: isend or irecv, waited for.
  void send(const Tensor& tensor, int dst, const SendOptions& opts);
  void recv(Tensor& tensor, int src, const SendOptions& opts);
  /// A backend over the members `ranks` (group ranks of this backend, ascending and unique).
  /// Every rank of this backend must call it, in the same order; non-members get nullptr.
  virtual std::shared_ptr<Backend> new_group(const std::vector<int>& ranks);

  /// A timed run, timed as nccl-tests times: begin_timed(), the operations with a mark() at
  /// each point to time, end_timed(). Meanwhile a backend that can (NCCL) returns from a
  /// collective once it is launched, so the device runs them back to back with no host round
  /// trip between, and notes each mark on the device's timeline; a barrier still waits. The
  /// host must not touch the buffers until end_timed(), which waits for everything launched,
  /// `timeout` at most, and returns each mark's time since begin_timed(), in microseconds.
  /// Default: every call has completed when it returns; the marks are the host's clock.
  virtual void begin_timed();
  virtual void mark();
  virtual std::vector<double> end_timed(std::chrono::milliseconds timeout);

 protected:
  /// `liveness` (optional) names lost peers in errors; `default_timeout` is what a collective
  /// whose options say 0 runs under.
  Backend(int rank, int size, std::vector<int> global_ranks, std::shared_ptr<Liveness> liveness = nullptr,
          std::chrono::milliseconds default_timeout = std::chrono::milliseconds(30000))
      : rank_(rank), size_(size), global_ranks_(std::move(global_ranks)), liveness_(std::move(liveness)),
        default_timeout_(default_timeout) {}
  [[noreturn]] void unsupported(const char* op) const;

  /// The timeout a collective runs under: its own, or the backend's default.
  std::chrono::milliseconds timeout_of(const CollectiveOptions& o) const {
    return o.timeout.count() > 0 ? o.timeout : default_timeout_;
  }
  /// new_group's rule for `ranks`: ascending, unique, and ranks of this group (BackendError).
  void check_group_ranks(const std::vector<int>& ranks) const;
  /// Rethrows a failure of `op` (e.g. "all_reduce", "nccl broadcast") as a distrun error
  /// naming the op and this rank: a PeerError when the heartbeats name a lost member; a
  /// TimeoutError when `e` is one; PeerError and CollectiveMismatchError pass unchanged (they
  /// already say everything); anything else is a BackendError.
  [[noreturn]] void raise_failure(const std::string& op, const std::exception& e) const;

  int rank_;
  int size_;
  std::vector<int> global_ranks_;  // group rank -> global rank; empty for the world
  std::shared_ptr<Liveness> liveness_;
  std::chrono::milliseconds default_timeout_;

 private:
  // The default timed run's: when it began, and its marks (us since then).
  std::chrono::steady_clock::time_point timed_begin_;
  std::vector<double> timed_marks_;
};

}  // namespace distrun
