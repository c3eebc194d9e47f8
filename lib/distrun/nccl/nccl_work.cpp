#include "distrun/nccl/nccl_work.hpp"

#include <string>

#include "distrun/core/error.hpp"

namespace distrun::nccl {

NcclWork::NcclWork(std::shared_ptr<const FailureNamer> namer, std::shared_ptr<P2PChannel> channel, const char* op,
                   std::shared_ptr<CudaEvent> event, Tensor tensor, std::chrono::milliseconds timeout)
    : namer_(std::move(namer)), channel_(std::move(channel)), op_(op), event_(std::move(event)),
      keep_(std::move(tensor)), timeout_(timeout) {}

NcclWork::~NcclWork() {
  if (!done_ && !channel_->comm->aborted()) channel_->keep_until_done(std::move(event_), std::move(keep_));
}

void NcclWork::wait(std::chrono::milliseconds timeout) {
  if (done_) return;
  if (channel_->comm->aborted())
    throw BackendError(std::string("backend nccl: ") + op_ +
                       ": the communicator was aborted after a failure; the transfer did not complete");
  try {
    channel_->comm->wait(event_->get(), op_, deadline_after(timeout.count() > 0 ? timeout : timeout_));
  } catch (const std::exception& e) {
    channel_->comm->abort();
    namer_->raise(op_, e);
  }
  done_ = true;
}

bool NcclWork::is_completed() {
  if (!done_ && !channel_->comm->aborted()) done_ = cudaEventQuery(event_->get()) == cudaSuccess;
  return done_ || channel_->comm->aborted();
}

}  // namespace distrun::nccl
