#include "distrun/nccl/p2p_channel.hpp"

#include <algorithm>
#include <cstring>

#include "distrun/core/error.hpp"
#include "distrun/nccl/nccl_types.hpp"
#include "distrun/nccl/stream_order.hpp"
#include "distrun/nccl/unique_id_exchange.hpp"

namespace distrun::nccl {

P2PChannel::P2PChannel(std::shared_ptr<Store> store, std::string key, bool is_sender, int device)
    : store_(std::move(store)), key_(std::move(key)), is_sender_(is_sender), device_(device),
      peer_in_comm_(is_sender ? 1 : 0) {}

P2PChannel::~P2PChannel() {
  if (thread_.joinable()) thread_.join();  // bounded by the first operation's deadline
  // Transfers whose Work was dropped may still need the peer: a bounded wait for them, as a
  // finalize would flush them, before the twin (which cannot be finalized with a bound) aborts.
  const auto deadline = deadline_after(std::chrono::seconds(10));
  for (auto& op : kept_)
    if (NcclComm* c = op->launched_on) try {
        c->wait(op->done->get(), "p2p transfer of a dropped Work", deadline);
      } catch (...) {
        break;  // aborted: the rest are gone too
      }
  comm_.reset();  // the twin before the parent whose resources it shares
  setup_comm_.reset();
  kept_.clear();
  queue_.clear();
}

void P2PChannel::submit(const std::shared_ptr<P2POp>& op) {
  std::unique_lock<std::mutex> lock(mu_);
  if (stop_) throw BackendError("p2p: the channel was aborted after an earlier failure");
  if (error_) std::rethrow_exception(error_);
  if (ready_) return launch(*op, *comm_);
  op->produced = std::make_unique<CudaEvent>();
  op->produced->record(cudaStreamLegacy);
  queue_.push_back(op);
  if (!thread_.joinable()) thread_ = std::thread([this] { set_up(); });
}

void P2PChannel::set_up() {
  try {
    DISTRUN_CUDA_CHECK(cudaSetDevice(device_));
    std::shared_ptr<P2POp> first;
    {
      std::lock_guard<std::mutex> lock(mu_);
      first = queue_.front();
      queue_.pop_front();
    }
    const Clock::time_point deadline = first->deadline;
    const std::string raw = take_id(deadline);
    ncclUniqueId id;
    std::memcpy(&id, raw.data(), sizeof(id));
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) throw BackendError("p2p channel set-up: aborted");
      setup_comm_ = NcclComm::start(2, 1 - peer_in_comm_, id);
    }
    // Outside the lock: abort() cancels these waits.
    setup_comm_->ensure_ready("p2p channel set-up", deadline);
    launch(*first, *setup_comm_);
    first.reset();  // its Work, or the kept list, holds it now
    {
      std::lock_guard<std::mutex> lock(mu_);
      launched_.notify_all();
    }
    std::unique_ptr<NcclComm> twin = setup_comm_->blocking_twin(1 - peer_in_comm_, deadline);
    std::lock_guard<std::mutex> lock(mu_);
    comm_ = std::move(twin);
    if (stop_) throw BackendError("p2p channel set-up: aborted");
    for (; !queue_.empty(); queue_.pop_front()) launch(*queue_.front(), *comm_);
    ready_ = true;
    launched_.notify_all();
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = std::current_exception();
    queue_.clear();
    abort_comms();
    launched_.notify_all();
  }
}

std::string P2PChannel::take_id(Clock::time_point deadline) {
  const auto left = [&] {
    return std::max(std::chrono::milliseconds(1),
                    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
  };
  if (!is_sender_) {
    // Looked for in short slices, not one long wait, so that an abort is seen at once.
    for (int sleep_us = 50; !store_->check({key_}); sleep_us = std::min(sleep_us * 2, 20000)) {
      if (stop_) throw BackendError("p2p channel set-up: aborted");
      if (Clock::now() >= deadline)
        throw TimeoutError(
            "p2p channel set-up: the sender made no first send before the deadline (no NCCL unique id "
            "under '" +
            key_ + "')");
      std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
    }
  }
  return exchange_unique_id(*store_, key_, is_sender_ ? 0 : 1, 0, sizeof(ncclUniqueId), NcclComm::new_unique_id,
                            left());
}

void P2PChannel::launch(P2POp& op, NcclComm& comm) {
  release_completed();
  if (op.produced)
    DISTRUN_CUDA_CHECK(cudaStreamWaitEvent(stream_.get(), op.produced->get(), 0));
  else
    order_after_producers(stream_.get(), produced_.get());
  const size_t count = size_t(op.tensor.numel());
  const ncclDataType_t dt = nccl_dtype(op.tensor.dtype());
  ncclResult_t r;
  {
    auto held = comm.hold();
    // ncclRecv writes into the tensor, whose storage the caller handed over as writable.
    void* data = op.tensor.data();
    r = op.is_send ? ncclSend(data, count, dt, peer_in_comm_, comm.get(), stream_.get())
                   : ncclRecv(data, count, dt, peer_in_comm_, comm.get(), stream_.get());
  }
  // A nonblocking first launch settles once the peer's first operation has connected them.
  comm.settle(r, op.is_send ? "ncclSend" : "ncclRecv", op.deadline);
  op.done->record(stream_.get());
  op.launched_on = &comm;
}

NcclComm& P2PChannel::wait_launched(const P2POp& op, Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  launched_.wait_until(lock, deadline, [&] { return op.launched_on || error_ || stop_; });
  if (NcclComm* c = op.launched_on) return *c;
  if (error_) std::rethrow_exception(error_);
  if (stop_) throw BackendError("p2p: the channel was aborted after a failure; the transfer did not start");
  throw TimeoutError("p2p channel set-up: not done by the deadline (the peer made no matching send or receive)");
}

void P2PChannel::abort() noexcept {
  if (stop_.exchange(true)) return;
  std::lock_guard<std::mutex> lock(mu_);
  // A set-up under way stops at its next look and aborts them on its way out.
  if (setup_comm_) setup_comm_->cancel();
  if (comm_) comm_->cancel();
  if (!thread_.joinable() || ready_ || error_) abort_comms();
  launched_.notify_all();
}

void P2PChannel::abort_comms() noexcept {
  if (comm_) comm_->abort();
  if (setup_comm_) setup_comm_->abort();
}

void P2PChannel::keep_until_done(std::shared_ptr<P2POp> op) {
  std::lock_guard<std::mutex> lock(kept_mu_);
  kept_.push_back(std::move(op));
}

void P2PChannel::release_completed() {
  std::lock_guard<std::mutex> lock(kept_mu_);
  kept_.erase(std::remove_if(kept_.begin(), kept_.end(),
                             [](const std::shared_ptr<P2POp>& op) {
                               return op->launched_on && cudaEventQuery(op->done->get()) != cudaErrorNotReady;
                             }),
              kept_.end());
}

}  // namespace distrun::nccl
