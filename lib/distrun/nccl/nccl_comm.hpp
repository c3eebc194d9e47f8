// One NCCL communicator, nonblocking, with every wait bounded by a deadline, so a peer that never
// arrives or dies mid-collective becomes a TimeoutError/BackendError instead of a hang. Nonblocking
// so that init, split and abort can be bounded (a blocking init cannot be aborted: there is no
// handle until it returns); NCCL starts a thread only for those set-up jobs, never for an
// ordinary collective. Set-up is polled (poll_ready); completion is waited for by sleeping in
// the driver while a watchdog (watchdog.hpp) enforces the deadline. After a failure the
// communicator is aborted (ncclCommAbort), which also stops its kernels on the device.
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

  /// As init(), but returns while NCCL is still connecting: ensure_ready() waits for it.
  static std::unique_ptr<NcclComm> start(int size, int rank, const ncclUniqueId& id);

  /// Waits until the communicator is initialised (at once after the first success), polling its
  /// state until `deadline` (TimeoutError). BackendError on failure.
  void ensure_ready(const char* what, Clock::time_point deadline);

  /// ncclCommSplit: every rank of this communicator calls it; ranks with the same `color`
  /// (>= 0) form a new communicator ordered by `key`; color < 0 returns nullptr.
  std::unique_ptr<NcclComm> split(int color, int key, Clock::time_point deadline);

  /// Finalizes (bounded wait) and destroys the communicator, or aborts it when it failed.
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  ncclComm_t get() const { return comm_; }
  bool aborted() const { return aborted_; }

  /// The communicator to this thread until the lock goes: hold it around NCCL calls that use
  /// get() (a launch, a group), and never across wait(). The members below take it themselves.
  std::unique_lock<std::recursive_mutex> hold() { return std::unique_lock<std::recursive_mutex>(mu_); }

  /// Checks the result `r` of the NCCL call `call`; when it is ncclInProgress, polls until the
  /// communicator settles or `deadline` passes (TimeoutError). BackendError on any failure.
  void settle(ncclResult_t r, const char* call, Clock::time_point deadline);

  /// Waits until `event` (a blocking-sync event) has completed on the device, asleep in
  /// cudaEventSynchronize while the watchdog aborts the communicator at `deadline` (TimeoutError)
  /// or on an NCCL error (BackendError). `what` names the operation in messages.
  void wait(cudaEvent_t event, const char* what, Clock::time_point deadline);

  /// ncclCommAbort, once: releases the communicator without waiting for its peers.
  void abort() noexcept;

 private:
  explicit NcclComm(ncclComm_t comm) : comm_(comm) {}
  // BackendError once aborted (the handle is gone).
  void require_alive(const char* what) const;
  // Polls ncclCommGetAsyncError until it is not ncclInProgress; throws on error or deadline.
  void poll_ready(const char* call, Clock::time_point deadline);

  ncclComm_t comm_ = nullptr;
  // Recursive: a launch held by its caller settles (polls) and may abort under the same lock.
  std::recursive_mutex mu_;
  std::atomic<bool> aborted_{false};  // set by the watchdog's thread too
  bool ready_ = false;
  // Child handles of splits that did not settle: NCCL may write them until this is aborted.
  std::vector<std::unique_ptr<ncclComm_t>> split_slots_;
  // Bounds wait(): started at the first wait that has to block; stopped before the handle goes.
  std::unique_ptr<Watchdog> watchdog_;
};

/// A deadline `timeout` from now.
inline Clock::time_point deadline_after(std::chrono::milliseconds timeout) { return Clock::now() + timeout; }

}  // namespace distrun::nccl
