// NcclBackend: every collective of the spec on CUDA tensors, through one stream and two NCCL
// communicators per group for the collectives (nccl_comm.hpp: a blocking one for NCCL's own
// collectives, no thread per operation; its nonblocking parent for set-up, splits and the
// collectives made of sends and receives, whose connections are made at first use) and one
// channel (two-rank communicator and stream) per direction and peer for point-to-point.
// Collectives block until the device has finished (so results can be read at once, as with
// GlooBackend), asleep in the driver while a watchdog holds the deadline: a hung or dead peer
// aborts the communicator and becomes a TimeoutError/PeerError naming the peer when the
// heartbeats tell. Inside a timed run (Backend::begin_timed) NCCL's own collectives return once
// launched.
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
  int device = 0;                            // the CUDA device (device_for_local_rank()); tensors must live there
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
  void broadcast(Tensor& tensor, const BroadcastOptions& opts) override;
  void all_reduce(Tensor& tensor, const AllreduceOptions& opts) override;
  void reduce(Tensor& tensor, const ReduceOptions& opts) override;
  void all_gather(const Tensor& in, Tensor& out, const AllgatherOptions& opts) override;
  void gather(const Tensor& in, Tensor& out, const GatherOptions& opts) override;
  void scatter(const Tensor& in, Tensor& out, const ScatterOptions& opts) override;
  void reduce_scatter(const Tensor& in, Tensor& out, const ReduceScatterOptions& opts) override;
  void all_to_all(const Tensor& in, Tensor& out, const AllToAllOptions& opts) override;
  void send(const Tensor& tensor, int dst, const SendOptions& opts) override;
  void recv(Tensor& tensor, int src, const SendOptions& opts) override;
  /// Launched when called, as in torch: on the channel of this direction (its own two-rank
  /// communicator and stream, p2p_channel.hpp), ordered after the tensor's producers, never
  /// behind a collective. Sends from one rank to one peer arrive in the order they were made
  /// (NCCL has no tags: opts.tag is ignored).
  std::shared_ptr<Work> isend(const Tensor& tensor, int dst, const SendOptions& opts) override;
  std::shared_ptr<Work> irecv(Tensor& tensor, int src, const SendOptions& opts) override;
  void barrier(const BarrierOptions& opts) override;
  /// ncclCommSplit of this backend's communicator; every rank must call it.
  std::shared_ptr<Backend> new_group(const std::vector<int>& ranks) override;
  /// NCCL's own collectives return once launched (gather, scatter, all_to_all and
  /// point-to-point still wait); marks are timing events on the collectives' stream, and
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
  // Starts the point-to-point channels to and from every peer (ids through the store).
  void create_channels(std::chrono::steady_clock::time_point deadline);
  // Made once, shared with the Works (they must not reach back into a backend that may be gone).
  std::shared_ptr<const nccl::FailureNamer> failure_namer();
  // Launches one send or receive on its channel.
  std::shared_ptr<Work> launch_p2p(bool is_send, const Tensor& tensor, int peer, const SendOptions& opts);
  void create_stream();
  void destroy_stream() noexcept;
  // Sets the device and checks the communicator is usable (not aborted by an earlier failure).
  void prepare(const char* op);
  // Runs `enqueue` (NCCL calls on `comm`, on the stream), then blocks until the device has finished.
  template <typename F>
  void run(const char* op, std::chrono::milliseconds timeout, nccl::NcclComm& comm, F&& enqueue);

  std::shared_ptr<Store> store_;
  NcclBackendOptions options_;
  // Nonblocking: set-up, new_group's splits, gather/scatter/all_to_all (a thread per call, but
  // bounded while a first call connects peers), and the parent of comm_.
  std::shared_ptr<nccl::NcclComm> async_comm_;
  std::shared_ptr<nccl::NcclComm> comm_;  // blocking: NCCL's own collectives and barrier
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
  // By peer (none for this rank): the channel of our sends to it, and of its sends to us.
  std::vector<std::shared_ptr<nccl::P2PChannel>> send_channels_, recv_channels_;
};

}  // namespace distrun
