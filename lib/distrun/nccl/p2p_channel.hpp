// One direction of point-to-point traffic between two ranks: its own two-rank communicator and
// its own stream, as torch's ProcessGroupNCCL keeps communicators apart from the collectives'.
//
// Why a communicator of its own, and one per direction: NCCL runs all the kernels of one
// communicator in the order they were launched, whatever stream they were launched on. With
// sends on the collectives' communicator, `isend; all_reduce` on one rank against
// `all_reduce; irecv` on the other waits in a circle (the send cannot finish before the peer's
// receive, which is queued behind the peer's all_reduce, which needs ours). With both directions
// on one pair communicator, two ranks that each isend to the other and then irecv would queue
// each receive behind a send that needs it. One channel per direction carries the sends of one
// rank to one peer, in program order, which is the order NCCL matches them in (NCCL has no tags).
//
// Made on first use, as torch makes its pair communicators, but never waited for in the call
// that needs it: the peer may be busy in a collective that needs this rank (the circle above),
// and distrun's collectives wait on the host. So the first operation in each direction starts a
// set-up thread and is queued; the thread (one per channel, gone once the channel is set up)
// takes the id from the store (the sender makes it and publishes it under the channel's key,
// the receiver looks for it), joins the nonblocking two-rank communicator, launches the first
// operation on it (its first launch connects the two ranks, which needs the peer's first
// operation, so both sides do it on the same communicator), splits a blocking twin from it
// (bounded, as every split), and launches what was queued meanwhile on the twin. Every later
// operation is launched in the caller's thread on the twin: inline, no thread per operation (on
// a nonblocking communicator NCCL 2.28 starts one per group). Every step of the set-up is
// bounded by the first operation's deadline; a channel whose peer never comes fails its
// operations with a TimeoutError.
//
// A Work dropped before its transfer completed leaves its operation here, so the memory NCCL
// reads or writes is not handed out again before the device is done with it; nothing else
// waits for the transfer (no default-stream wait, which would park every later launch and copy
// behind a send whose peer may never receive, and the abort behind them). It is released when
// its event has completed, looked at before each launch on the channel, and when the channel
// goes, after its communicators (finalized, or aborted: their kernels have returned).
#pragma once
#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "distrun/core/tensor.hpp"
#include "distrun/nccl/cuda_event.hpp"
#include "distrun/nccl/cuda_stream.hpp"
#include "distrun/nccl/nccl_comm.hpp"
#include "distrun/store/store.hpp"

namespace distrun::nccl {

/// One send or receive, from its call to its completion.
struct P2POp {
  bool is_send = true;
  Tensor tensor;
  Clock::time_point deadline;
  std::unique_ptr<CudaEvent> produced;  // queued ops: their inputs' producers, recorded at the call
  std::shared_ptr<CudaEvent> done = std::make_shared<CudaEvent>();  // recorded after the launch
  std::atomic<NcclComm*> launched_on{nullptr};                      // set once `done` is recorded
};

class P2PChannel {
 public:
  /// The channel from `sender`'s side (`is_sender`) or the receiver's, on `device`; its id
  /// travels under `key` in `store`. Nothing is created before the first submit().
  P2PChannel(std::shared_ptr<Store> store, std::string key, bool is_sender, int device);
  /// Waits for the set-up thread (bounded by its deadline), then finalizes or aborts.
  ~P2PChannel();
  P2PChannel(const P2PChannel&) = delete;
  P2PChannel& operator=(const P2PChannel&) = delete;

  /// Launches `op` (on the device after the default stream's work so far): at once on the
  /// twin once the channel is set up, else after the set-up, in the order submitted.
  /// BackendError after an abort; errors of an inline launch.
  void submit(const std::shared_ptr<P2POp>& op);

  /// Waits until `op` is launched and returns the communicator it runs on; TimeoutError at
  /// `deadline`, the set-up's own error when it failed, BackendError after an abort.
  NcclComm& wait_launched(const P2POp& op, Clock::time_point deadline);

  /// Stops the set-up and aborts the communicators, once; their operations fail.
  void abort() noexcept;
  bool aborted() const { return stop_; }

  /// Keeps `op` (its tensor) until its transfer has completed.
  void keep_until_done(std::shared_ptr<P2POp> op);

 private:
  // The set-up thread's work (see above).
  void set_up();
  // Launches `op` on `comm` and records its event; `comm` settles the launch.
  void launch(P2POp& op, NcclComm& comm);
  // The channel's unique id: made and published by the sender, read by the receiver.
  std::string take_id(Clock::time_point deadline);
  // Releases the kept operations whose transfer has completed.
  void release_completed();
  void abort_comms() noexcept;

  // Declared first, destroyed last: the communicators' work runs on it.
  CudaStream stream_;
  CudaEvent produced_;  // inline launches: recorded on the default stream first (stream_order.hpp)
  std::shared_ptr<Store> store_;
  const std::string key_;
  const bool is_sender_;
  const int device_;
  const int peer_in_comm_;  // the other side's rank in the communicators: the sender is 0

  std::mutex mu_;  // all below; an inline launch holds it (it only enqueues)
  std::condition_variable launched_;
  std::deque<std::shared_ptr<P2POp>> queue_;  // submitted, waiting for the set-up
  std::unique_ptr<NcclComm> setup_comm_;      // nonblocking: the set-up and the first operation
  std::unique_ptr<NcclComm> comm_;            // its blocking twin: every later operation
  bool ready_ = false;                        // set up: submit() launches on comm_
  std::exception_ptr error_;                  // the set-up's failure
  std::thread thread_;
  std::atomic<bool> stop_{false};

  std::mutex kept_mu_;  // Works are dropped on any thread
  std::vector<std::shared_ptr<P2POp>> kept_;
};

}  // namespace distrun::nccl
