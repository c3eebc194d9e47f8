// NcclBackend: every collective of the spec on CUDA tensors, through one stream and two NCCL
// communicators per group for the collectives (nccl_comm.hpp: a blocking one that runs every
// collective, no thread per operation; its nonblocking parent for set-up, splits and the
// bounded first connection of the peers that gather, scatter and all_to_all need) and, made
// at first use, one channel (two-rank communicators and stream) per direction and peer for
// point-to-point.
// Collectives block until the device has finished (so results can be read at once, as with
// GlooBackend), asleep in the driver while a watchdog holds the deadline: a hung or dead peer
// aborts the communicator and becomes a TimeoutError/PeerError naming the peer when the
// heartbeats tell. Inside a timed run (Backend::begin_timed) collectives return once launched.
#pragma once
#include <chrono>
#include <memory>
#include <vector>

#include "distrun/backend/backend.hpp"
#include "distrun/backend/liveness.hpp"
#include "distrun/store/store.hpp"

// CUDA/NCCL handle types, declared here so that users of this header need no CUDA headers.
typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;

namespace distrun {

namespace nccl {
class NcclComm;
class CudaEvent;
struct P2PChannel;
struct FailureNamer;
}  // namespace nccl

struct NcclBackendOptions {
  std::chrono::milliseconds timeout{30000};  // default for every collective and the rendezvous
  int device = 0;                            // the CUDA device (cuda_device_for_local_rank()); tensors must live there
};

class NcclBackend : public Backend {
 public:
  /// Creates the communicator of `size` ranks: rank 0 makes the NCCL unique id and passes it
  /// through `store`. Throws ConfigError when NCCL cannot be loaded, no CUDA device is visible
  /// or `options.device` does not exist. `liveness` (optional) names lost peers in errors.
  NcclBackend(std::shared_ptr<Store> store, int rank, int size, const NcclBackendOptions& options,
              std::shared_ptr<Liveness> liveness = nullptr, std::vector<int> global_ranks = {});
  ~NcclBackend() override;

  std::string name() const override { return "nccl"; }
  Device tensor_device() const override { return Device::cuda(options_.device); }
  int device() const { return options_.device; }
  /// Every collective, each kind by its own NCCL calls (run_kind).
  void run(const CollectiveOp& op) override;
  /// On the channel of this direction (its own two-rank communicator and stream,
  /// p2p_channel.hpp), ordered after the tensor's producers, never behind a collective:
  /// launched when called, as in torch, once the channel is set up; its first operation starts
  /// the set-up and returns without waiting for the peer. Sends from one rank to one peer
  /// arrive in the order they were made (NCCL has no tags: opts.tag is ignored).
  std::shared_ptr<Work> isend(const Tensor& tensor, int dst, const SendOptions& opts) override;
  std::shared_ptr<Work> irecv(Tensor& tensor, int src, const SendOptions& opts) override;
  /// ncclCommSplit of this backend's communicator; every rank must call it.
  std::shared_ptr<Backend> new_group(const std::vector<int>& ranks) override;
  /// Collectives return once launched (point-to-point, and the first gather, scatter or
  /// all_to_all that connects new peers, still wait); marks are timing events on the collectives' stream, and
  /// end_timed() waits for the last under the watchdog.
  void begin_timed() override;
  void mark() override;
  std::vector<double> end_timed(std::chrono::milliseconds timeout) override;

  /// Aborts the communicator and throws an error naming the op, this rank and, when the
  /// heartbeats tell, the lost peer: PeerError, TimeoutError or BackendError.
  [[noreturn]] void fail(const char* op, const std::exception& e);

 private:
  // A member of a split communicator (new_group).
  NcclBackend(std::shared_ptr<Store> store, std::string tag, std::shared_ptr<nccl::NcclComm> comm, int rank, int size,
              const NcclBackendOptions& options, std::shared_ptr<Liveness> liveness, std::vector<int> global_ranks);
  // The channel of our sends to `peer` (is_send) or of its sends to us, made at first use.
  std::shared_ptr<nccl::P2PChannel> channel(bool is_send, int peer);
  // Connects, on the nonblocking communicator (bounded), the peers this rank sends to (`to`) and
  // receives from (`from`) in a gather, scatter or all_to_all that no earlier one connected, so
  // that the operation itself runs on the blocking one without waiting in its launch.
  void connect_peers(const char* op, std::vector<int> to, std::vector<int> from, std::chrono::milliseconds timeout);
  // Made once, shared with the Works (they must not reach back into a backend that may be gone).
  std::shared_ptr<const nccl::FailureNamer> failure_namer();
  // Launches one send or receive on its channel.
  std::shared_ptr<Work> launch_p2p(bool is_send, const Tensor& tensor, int peer, const SendOptions& opts);
  void create_stream();
  void destroy_stream() noexcept;
  // Sets the device and checks the communicator is usable (not aborted by an earlier failure).
  void prepare(const char* op);
  // run()'s for kind K: a specialization in nccl_backend.cpp for each kind, and its case in run().
  template <CollectiveKind K>
  void run_kind(const CollectiveOp& op);
  // Runs `enqueue` (NCCL calls on `comm`, on the stream), then blocks until the device has finished.
  template <typename F>
  void run(const char* op, std::chrono::milliseconds timeout, nccl::NcclComm& comm, F&& enqueue);

  std::shared_ptr<Store> store_;
  NcclBackendOptions options_;
  // Nonblocking: set-up, new_group's splits, connect_peers(), and the parent of comm_.
  std::shared_ptr<nccl::NcclComm> async_comm_;
  std::shared_ptr<nccl::NcclComm> comm_;  // blocking: every collective and barrier
  cudaStream_t stream_ = nullptr;
  cudaEvent_t done_ = nullptr;      // recorded after each blocking collective
  cudaEvent_t produced_ = nullptr;  // recorded on the default stream before each launch
  Tensor scratch_;                  // one element: barrier()'s, and the unused buffer of a non-root
  // scratch_'s address, made at first use.
  void* scratch();
  std::shared_ptr<const nccl::FailureNamer> namer_;
  std::string tag_;      // names this communicator's keys in the store (unique_id_exchange.hpp)
  int groups_made_ = 0;  // new_group calls so far: the tag of the next child
  bool timing_ = false;  // in a timed run: run() does not wait for the blocking communicator's launches
  std::vector<std::unique_ptr<nccl::CudaEvent>> marks_;  // the timed run's: its start, then each mark()
  size_t marks_used_ = 0;
  // By peer (none for this rank; null until first used): the channel of our sends to it, and
  // of its sends to us.
  using Channels = std::vector<std::shared_ptr<nccl::P2PChannel>>;
  Channels send_channels_ = Channels(size_t(size_)), recv_channels_ = Channels(size_t(size_));
  // By peer: whether this rank's connection for sends to it, and for receives from it, on the
  // collectives' communicators is made (connect_peers()). Both ends of a connection mark it
  // in the same call, so every rank decides alike whether an operation connects.
  std::vector<char> sending_to_ = std::vector<char>(size_t(size_)), receiving_from_ = sending_to_;
  Tensor probe_;  // connect_peers()'s buffers: one element to and from each peer
};

}  // namespace distrun
