// One NCCL communicator, with every wait bounded by a deadline, so a peer that never arrives or
// dies mid-collective becomes a TimeoutError/BackendError instead of a hang.
//
// Two kinds. A nonblocking one (init, split) has every call bounded: a call that returns
// ncclInProgress is polled until it settles (poll_ready), and init, split and abort can be given
// up on (a blocking init cannot be aborted: there is no handle until it returns). But NCCL 2.28
// runs every group of a nonblocking communicator, the implicit one of a lone collective
// included, in a thread it starts for it (group.cc, ncclGroupEndInternal): a thread create and
// join per operation. So operations run on a blocking twin (blocking_twin(): a split of the
// same ranks, made through the nonblocking parent and so bounded as well, sharing its
// resources and connections), whose launches run inline in the caller's thread and only
// enqueue. No launch on it may wait for a peer, so its connections are made beforehand: the
// collectives' while the twin is created (NCCL_RUNTIME_CONNECT=0, set by the backend), the
// point-to-point ones by a bounded first transfer on the parent (nccl_backend.cpp,
// p2p_channel.hpp).
//
// Completion is waited for by sleeping in the driver while a watchdog (watchdog.hpp) enforces
// the deadline. After a failure the communicator is aborted (ncclCommAbort), which also stops
// its kernels on the device.
//
// NCCL forbids calls on one communicator from two threads at once (ncclCommGetAsyncError, for
// one, reaps the communicator's group job): every call on it is made under its mutex, the
// owner's launches (hold()) as the watchdog's checks and abort, as torch's ProcessGroupNCCL
// serialises them.
#pragma once
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "distrun/nccl/watchdog.hpp"

namespace distrun::nccl {

using Clock = std::chrono::steady_clock;

class NcclComm {
 public:
  /// Joins communicator `id` as `rank` of `size` (ncclCommInitRankConfig, nonblocking) on the
  /// current CUDA device; TimeoutError when not every rank has joined by `deadline`.
  static std::unique_ptr<NcclComm> init(int size, int rank, const ncclUniqueId& id, Clock::time_point deadline);

  /// A new ncclUniqueId, as bytes (unique_id_exchange.hpp passes them through the store).
  static std::string new_unique_id();

  /// As init(), but returns while NCCL is still connecting: ensure_ready() waits for it.
  static std::unique_ptr<NcclComm> start(int size, int rank, const ncclUniqueId& id);

  /// Waits until the communicator is initialised (at once after the first success), polling its
  /// state until `deadline` (TimeoutError). BackendError on failure.
  void ensure_ready(const char* what, Clock::time_point deadline);

  /// ncclCommSplit: every rank of this communicator calls it; ranks with the same `color`
  /// (>= 0) form a new communicator ordered by `key`; color < 0 returns nullptr.
  std::unique_ptr<NcclComm> split(int color, int key, Clock::time_point deadline);

  /// A blocking communicator of the same ranks (this one's `rank`), sharing this one's
  /// resources (splitShare); every rank calls it. Made through this nonblocking communicator,
  /// so bounded by `deadline` as split() is.
  std::unique_ptr<NcclComm> blocking_twin(int rank, Clock::time_point deadline);

  /// Finalizes (bounded wait) and destroys a nonblocking communicator, or aborts it when it
  /// failed. A blocking one is aborted: its finalize could not be bounded, and every operation
  /// on it was waited for, so nothing is lost.
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  ncclComm_t get() const { return comm_; }
  bool aborted() const { return aborted_; }

  /// The communicator to this thread until the lock goes: hold it around NCCL calls that use
  /// get() (a launch, a group), and never across wait(). The members below take it themselves.
  std::unique_lock<std::recursive_mutex> hold() { return std::unique_lock<std::recursive_mutex>(mu_); }

  /// Checks the result `r` of the NCCL call `call`; when it is ncclInProgress, or ncclSuccess on
  /// a nonblocking communicator, polls until the communicator settles or `deadline` passes
  /// (TimeoutError). BackendError on any failure.
  void settle(ncclResult_t r, const char* call, Clock::time_point deadline);

  /// Waits until `event` (a blocking-sync event) has completed on the device, asleep in
  /// cudaEventSynchronize while the watchdog aborts the communicator at `deadline` (TimeoutError)
  /// or on an NCCL error (BackendError). `what` names the operation in messages.
  void wait(cudaEvent_t event, const char* what, Clock::time_point deadline);

  /// ncclCommAbort, once: releases the communicator without waiting for its peers.
  void abort() noexcept;

  /// Makes a poll under way in another thread (ensure_ready, settle, split) give up at its next
  /// look with a BackendError, without the lock it holds; its thread then aborts.
  void cancel() noexcept { cancelled_ = true; }

 private:
  explicit NcclComm(ncclComm_t comm) : comm_(comm) {}
  // ncclCommSplit with `config`, bounded through this (nonblocking) communicator.
  std::unique_ptr<NcclComm> split_with(int color, int key, ncclConfig_t config, Clock::time_point deadline);
  // BackendError once aborted (the handle is gone).
  void require_alive(const char* what) const;
  // Polls ncclCommGetAsyncError until it is not ncclInProgress; throws on error or deadline.
  void poll_ready(const char* call, Clock::time_point deadline);

  ncclComm_t comm_ = nullptr;
  // Recursive: a launch held by its caller settles (polls) and may abort under the same lock.
  std::recursive_mutex mu_;
  std::atomic<bool> aborted_{false};  // set by the watchdog's thread too
  std::atomic<bool> cancelled_{false};
  bool ready_ = false;
  bool blocking_ = false;
  // Child handles of splits that did not settle: NCCL may write them until this is aborted.
  std::vector<std::unique_ptr<ncclComm_t>> split_slots_;
  // Bounds wait(): started at the first wait that has to block; stopped before the handle goes.
  std::unique_ptr<Watchdog> watchdog_;
};

/// A deadline `timeout` from now.
inline Clock::time_point deadline_after(std::chrono::milliseconds timeout) { return Clock::now() + timeout; }

}  // namespace distrun::nccl
