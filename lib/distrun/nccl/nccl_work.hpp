// The Work of an NCCL isend/irecv: a CUDA event recorded on the backend's stream after the
// operation; wait() polls it with a deadline through NcclBackend::wait_event.
#pragma once
#include <chrono>

#include "distrun/backend/backend.hpp"
#include "distrun/nccl/nccl_backend.hpp"

namespace distrun::nccl {

class NcclWork : public Work {
 public:
  /// Takes ownership of `event`; keeps `tensor`'s storage alive until the work is done.
  NcclWork(NcclBackend& backend, const char* op, cudaEvent_t event, Tensor tensor, std::chrono::milliseconds timeout);
  ~NcclWork() override;

  /// Blocks until the event has completed, `timeout` (0: the op's own) at most.
  void wait(std::chrono::milliseconds timeout) override;
  bool is_completed() override;

 private:
  NcclBackend& backend_;
  const char* op_;
  cudaEvent_t event_;
  Tensor keep_;
  std::chrono::milliseconds timeout_;
  bool done_ = false;
};

}  // namespace distrun::nccl
