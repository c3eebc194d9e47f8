// One direction of point-to-point traffic between two ranks: its own two-rank communicator and
// its own stream, as torch's ProcessGroupNCCL keeps communicators apart from the collectives'.
//
// Why a communicator of its own, and one per direction: NCCL runs all the kernels of one
// communicator in the order they were launched, whatever stream they were launched on. With
// sends on the collectives' communicator, `isend; all_reduce` on one rank against
// `all_reduce; irecv` on the other waits in a circle (the send cannot finish before the peer's
// receive, which is queued behind the peer's all_reduce, which needs ours). With both directions
// on one pair communicator, two ranks that each isend to the other and then irecv would queue
// each receive behind a send that needs it. One channel per direction carries the sends of one
// rank to one peer, in program order, which is the order NCCL matches them in (NCCL has no tags).
//
// Channels are created when the backend is, all at once and nonblocking (creators publish every
// id before anyone waits, so no order of creation can deadlock); an operation waits only for its
// own channel to be ready. Shared by the backend and the Works of its operations.
//
// A Work dropped before its transfer completed leaves its tensor and event here, so the memory
// NCCL reads or writes is not handed out again before the device is done with it; nothing else
// waits for the transfer (no default-stream wait, which would park every later launch and copy
// behind a send whose peer may never receive, and the abort behind them). They are released
// when their event has completed, looked at before each launch on the channel, and when the
// channel goes, after its communicator (finalized, or aborted: its kernels have returned).
#pragma once
#include <memory>
#include <mutex>
#include <vector>

#include "distrun/core/tensor.hpp"
#include "distrun/nccl/cuda_event.hpp"
#include "distrun/nccl/cuda_stream.hpp"
#include "distrun/nccl/nccl_comm.hpp"

namespace distrun::nccl {

struct P2PChannel {
  // Declared first, destroyed last: the communicator's work runs on it.
  CudaStream stream;
  CudaEvent produced;  // recorded on the default stream before each launch (stream_order.hpp)
  std::shared_ptr<NcclComm> comm;
  int peer_in_comm = 0;  // the other side's rank in `comm`: the sender is 0, the receiver 1

  ~P2PChannel() {
    comm.reset();  // finalized (its transfers done) or aborted (its kernels returned) first
    unwaited_.clear();
  }

  /// Keeps `tensor` until `event` (recorded after its transfer) has completed.
  void keep_until_done(std::shared_ptr<CudaEvent> event, Tensor tensor) {
    std::lock_guard<std::mutex> lock(mu_);
    unwaited_.push_back({std::move(event), std::move(tensor)});
  }

  /// Releases the tensors whose transfer has completed.
  void release_completed() {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < unwaited_.size();)
      if (cudaEventQuery(unwaited_[i].event->get()) == cudaErrorNotReady) {
        ++i;
      } else {
        unwaited_[i] = std::move(unwaited_.back());
        unwaited_.pop_back();
      }
  }

 private:
  struct Unwaited {
    std::shared_ptr<CudaEvent> event;
    Tensor tensor;
  };
  std::mutex mu_;  // Works are dropped on any thread
  std::vector<Unwaited> unwaited_;
};

}  // namespace distrun::nccl
