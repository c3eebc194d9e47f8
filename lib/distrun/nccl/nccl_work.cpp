#include "distrun/nccl/nccl_work.hpp"

#include "distrun/core/error.hpp"

namespace distrun::nccl {

NcclWork::NcclWork(NcclBackend& backend, std::shared_ptr<P2PChannel> channel, const char* op,
                   std::shared_ptr<CudaEvent> event, Tensor tensor, std::chrono::milliseconds timeout)
    : backend_(backend), channel_(std::move(channel)), op_(op), event_(std::move(event)), keep_(std::move(tensor)),
      timeout_(timeout) {}

void NcclWork::wait(std::chrono::milliseconds timeout) {
  if (done_) return;
  try {
    channel_->comm->wait(event_->get(), op_, deadline_after(timeout.count() > 0 ? timeout : timeout_));
  } catch (const std::exception& e) {
    channel_->comm->abort();
    backend_.fail(op_, e);
  }
  done_ = true;
}

bool NcclWork::is_completed() {
  if (!done_) done_ = cudaEventQuery(event_->get()) == cudaSuccess;
  return done_;
}

}  // namespace distrun::nccl
