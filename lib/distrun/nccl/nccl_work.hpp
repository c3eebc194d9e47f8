// The Work of an NCCL isend/irecv: its operation, submitted to its channel when it was made
// (p2p_channel.hpp: launched then, or by the channel's set-up once the peer has joined); a
// CUDA event recorded after the launch tells completion. It owns what it needs: its channel
// (communicators and stream), its operation (event and tensor) and what names a failure, never
// a reference to the backend, so it may outlive the backend and be waited for after an abort.
#pragma once
#include <chrono>
#include <memory>

#include "distrun/backend/backend.hpp"
#include "distrun/nccl/failure.hpp"
#include "distrun/nccl/p2p_channel.hpp"

namespace distrun::nccl {

class NcclWork : public Work {
 public:
  NcclWork(std::shared_ptr<const FailureNamer> namer, std::shared_ptr<P2PChannel> channel, const char* name,
           std::shared_ptr<P2POp> op, std::chrono::milliseconds timeout);
  /// Not waited for: the channel keeps the operation until the transfer has completed, so its
  /// memory is not handed to someone else meanwhile; nothing waits for it (p2p_channel.hpp).
  ~NcclWork() override;

  /// Blocks until this operation has completed, `timeout` (0: the op's own) at most, its
  /// channel's set-up included. After the channel was aborted (this or another operation
  /// failed): BackendError, never the result of a killed transfer.
  void wait(std::chrono::milliseconds timeout) override;
  /// True once this operation has completed, or once wait() would throw at once.
  bool is_completed() override;

 private:
  std::shared_ptr<const FailureNamer> namer_;
  std::shared_ptr<P2PChannel> channel_;
  const char* name_;
  std::shared_ptr<P2POp> op_;
  std::chrono::milliseconds timeout_;
  bool done_ = false;
};

}  // namespace distrun::nccl
