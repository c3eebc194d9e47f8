// The Work of an NCCL isend/irecv, launched when it was made on its channel (p2p_channel.hpp);
// a CUDA event recorded after it tells completion.
#pragma once
#include <chrono>
#include <memory>

#include "distrun/backend/backend.hpp"
#include "distrun/nccl/cuda_event.hpp"
#include "distrun/nccl/nccl_backend.hpp"
#include "distrun/nccl/p2p_channel.hpp"

namespace distrun::nccl {

class NcclWork : public Work {
 public:
  /// `event` was recorded on `channel`'s stream after the operation; `tensor`'s storage is kept
  /// alive until the work is done.
  NcclWork(NcclBackend& backend, std::shared_ptr<P2PChannel> channel, const char* op, std::shared_ptr<CudaEvent> event,
           Tensor tensor, std::chrono::milliseconds timeout);

  /// Blocks until this operation has completed, `timeout` (0: the op's own) at most.
  void wait(std::chrono::milliseconds timeout) override;
  /// True once this operation has completed.
  bool is_completed() override;

 private:
  NcclBackend& backend_;
  std::shared_ptr<P2PChannel> channel_;
  const char* op_;
  std::shared_ptr<CudaEvent> event_;
  Tensor keep_;
  std::chrono::milliseconds timeout_;
  bool done_ = false;
};

}  // namespace distrun::nccl
