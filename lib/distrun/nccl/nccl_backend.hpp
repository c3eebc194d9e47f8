// NcclBackend: every collective of the spec on CUDA tensors, through one NCCL communicator per
// group and one CUDA stream per backend. Calls block until the device has finished (so results
// can be read at once, as with GlooBackend), waiting with a deadline: a hung or dead peer aborts
// the communicator and becomes a TimeoutError/PeerError naming the peer when the heartbeats tell.
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
}

struct NcclBackendOptions {
  std::chrono::milliseconds timeout{30000};  // default for every collective and the rendezvous
  int device = 0;                             // the CUDA device (LOCAL_RANK); tensors must live there
};

class NcclBackend : public Backend {
 public:
  /// Creates the communicator of `size` ranks: rank 0 makes the NCCL unique id and passes it
  /// through `store`. Throws BackendError when no CUDA device is visible or `options.device` does
  /// not exist. `liveness` (optional) names lost peers in errors.
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
  /// Queued, not launched: every queued send and receive goes to NCCL in one group when a Work
  /// is waited for or tested, or before the next collective (so a ring of isend-to-next and
  /// irecv-from-previous cannot deadlock on the single stream). NCCL has no tags: messages
  /// between two ranks arrive in the order they were sent, and opts.tag is ignored.
  std::shared_ptr<Work> isend(const Tensor& tensor, int dst, const SendOptions& opts) override;
  std::shared_ptr<Work> irecv(Tensor& tensor, int src, const SendOptions& opts) override;
  void barrier(const BarrierOptions& opts) override;
  /// ncclCommSplit of this backend's communicator; every rank must call it.
  std::shared_ptr<Backend> new_group(const std::vector<int>& ranks) override;

  /// Launches the queued sends and receives (one NCCL group), recording each one's event.
  void launch_pending();

  /// Waits for `event` (recorded on this backend's stream after `op`) until `timeout`, turning a
  /// failure into a distrun error (see fail()). Used by the Work objects too.
  void wait_event(cudaEvent_t event, const char* op, std::chrono::milliseconds timeout);

  /// Aborts the communicator and throws an error naming the op, this rank and, when the
  /// heartbeats tell, the lost peer: PeerError, TimeoutError or BackendError.
  [[noreturn]] void fail(const char* op, const std::exception& e);

 private:
  // A member of a split communicator (new_group).
  NcclBackend(std::shared_ptr<nccl::NcclComm> comm, int rank, int size, const NcclBackendOptions& options,
              std::shared_ptr<Liveness> liveness, std::vector<int> global_ranks);
  void create_stream();
  void destroy_stream() noexcept;
  // Sets the device and checks the communicator is usable (not aborted by an earlier failure).
  void prepare(const char* op);
  // Queues a send or receive for launch_pending().
  std::shared_ptr<Work> queue_p2p(bool is_send, const Tensor& tensor, int peer, const SendOptions& opts);
  // Runs `enqueue` (NCCL calls on the stream), then blocks until the device has finished.
  template <typename F>
  void run(const char* op, std::chrono::milliseconds timeout, F&& enqueue);

  std::shared_ptr<Store> store_;
  NcclBackendOptions options_;
  std::shared_ptr<nccl::NcclComm> comm_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t done_ = nullptr;  // recorded after each blocking collective
  Tensor barrier_buf_;          // one element, for barrier()
  struct PendingP2P {
    bool is_send;
    Tensor tensor;
    int peer;
    std::shared_ptr<nccl::CudaEvent> done;
  };
  std::vector<PendingP2P> pending_;  // isend/irecv not yet launched
};

}  // namespace distrun
