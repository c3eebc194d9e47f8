#include "distrun/nccl/nccl_work.hpp"

#include "distrun/core/error.hpp"

namespace distrun::nccl {

NcclWork::NcclWork(NcclBackend& backend, const char* op, std::shared_ptr<CudaEvent> event, Tensor tensor,
                   std::chrono::milliseconds timeout)
    : backend_(backend), op_(op), event_(std::move(event)), keep_(std::move(tensor)), timeout_(timeout) {}

void NcclWork::wait(std::chrono::milliseconds timeout) {
  if (done_) return;
  backend_.launch_pending();
  if (!event_->recorded())  // an earlier failure aborted the communicator before the launch
    throw BackendError(std::string("backend nccl: ") + op_ + " was never launched: the communicator was aborted");
  backend_.wait_event(event_->get(), op_, timeout.count() > 0 ? timeout : timeout_);
  done_ = true;
}

bool NcclWork::is_completed() {
  if (done_) return true;
  backend_.launch_pending();
  done_ = event_->recorded() && cudaEventQuery(event_->get()) == cudaSuccess;
  return done_;
}

}  // namespace distrun::nccl
