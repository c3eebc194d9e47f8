#include "distrun/nccl/nccl_work.hpp"

#include <cuda_runtime_api.h>

namespace distrun::nccl {

NcclWork::NcclWork(NcclBackend& backend, const char* op, cudaEvent_t event, Tensor tensor,
                   std::chrono::milliseconds timeout)
    : backend_(backend), op_(op), event_(event), keep_(std::move(tensor)), timeout_(timeout) {}

NcclWork::~NcclWork() {
  // Destroying a pending event is allowed: CUDA releases it once it completes.
  cudaEventDestroy(event_);
}

void NcclWork::wait(std::chrono::milliseconds timeout) {
  if (done_) return;
  backend_.wait_event(event_, op_, timeout.count() > 0 ? timeout : timeout_);
  done_ = true;
}

bool NcclWork::is_completed() {
  if (!done_ && cudaEventQuery(event_) == cudaSuccess) done_ = true;
  return done_;
}

}  // namespace distrun::nccl
