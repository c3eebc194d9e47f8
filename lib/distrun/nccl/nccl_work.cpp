#include "distrun/nccl/nccl_work.hpp"

#include <string>

#include "distrun/core/error.hpp"

namespace distrun::nccl {

NcclWork::NcclWork(std::shared_ptr<const FailureNamer> namer, std::shared_ptr<P2PChannel> channel, const char* name,
                   std::shared_ptr<P2POp> op, std::chrono::milliseconds timeout)
    : namer_(std::move(namer)), channel_(std::move(channel)), name_(name), op_(std::move(op)), timeout_(timeout) {}

NcclWork::~NcclWork() {
  if (!done_ && !channel_->aborted()) channel_->keep_until_done(std::move(op_));
}

void NcclWork::wait(std::chrono::milliseconds timeout) {
  if (done_) return;
  if (channel_->aborted())
    throw BackendError(std::string("backend nccl: ") + name_ +
                       ": the communicator was aborted after a failure; the transfer did not complete");
  try {
    const auto deadline = deadline_after(timeout.count() > 0 ? timeout : timeout_);
    channel_->wait_launched(*op_, deadline).wait(op_->done->get(), name_, deadline);
  } catch (const std::exception& e) {
    channel_->abort();
    namer_->raise(name_, e);
  }
  done_ = true;
}

bool NcclWork::is_completed() {
  if (!done_ && !channel_->aborted() && op_->launched_on) done_ = cudaEventQuery(op_->done->get()) == cudaSuccess;
  return done_ || channel_->aborted();
}

}  // namespace distrun::nccl
