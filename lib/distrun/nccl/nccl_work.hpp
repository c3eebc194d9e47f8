// The Work of an NCCL isend/irecv. The operation is queued in the backend and launched, with
// every other queued send and receive, in one NCCL group when a Work is waited for or tested
// (or before the next collective); a CUDA event recorded after that group tells completion.
#pragma once
#include <chrono>
#include <memory>

#include "distrun/backend/backend.hpp"
#include "distrun/nccl/cuda_event.hpp"
#include "distrun/nccl/nccl_backend.hpp"

namespace distrun::nccl {

class NcclWork : public Work {
 public:
  /// `event` is recorded by the backend when it launches the operation; `tensor`'s storage is
  /// kept alive until the work is done.
  NcclWork(NcclBackend& backend, const char* op, std::shared_ptr<CudaEvent> event, Tensor tensor,
           std::chrono::milliseconds timeout);

  /// Launches the queued operations if needed, then blocks until this one has completed,
  /// `timeout` (0: the op's own) at most.
  void wait(std::chrono::milliseconds timeout) override;
  /// Launches the queued operations if needed; true once this one has completed.
  bool is_completed() override;

 private:
  NcclBackend& backend_;
  const char* op_;
  std::shared_ptr<CudaEvent> event_;
  Tensor keep_;
  std::chrono::milliseconds timeout_;
  bool done_ = false;
};

}  // namespace distrun::nccl
