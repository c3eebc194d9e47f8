// A CUDA event owned by whoever holds the last reference (a Work and the backend's queue of
// point-to-point operations share one until both are done with it).
#pragma once
#include <cuda_runtime_api.h>

#include "distrun/nccl/nccl_check.hpp"

namespace distrun::nccl {

class CudaEvent {
 public:
  /// An event on the current device, timing-free unless `timing` (cudaEventElapsedTime); a
  /// thread waiting for it sleeps in the driver instead of spinning (blocking sync), so a long
  /// transfer costs no CPU.
  explicit CudaEvent(bool timing = false) {
    DISTRUN_CUDA_CHECK(
        cudaEventCreateWithFlags(&event_, cudaEventBlockingSync | (timing ? 0u : unsigned(cudaEventDisableTiming))));
  }
  // Destroying a pending event is allowed: CUDA releases it once it completes.
  ~CudaEvent() { cudaEventDestroy(event_); }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  cudaEvent_t get() const { return event_; }
  /// Records the event on `stream`; until then, query() must not be trusted (a never-recorded
  /// event reads as complete), so callers check recorded() first.
  void record(cudaStream_t stream) {
    DISTRUN_CUDA_CHECK(cudaEventRecord(event_, stream));
    recorded_ = true;
  }
  bool recorded() const { return recorded_; }

 private:
  cudaEvent_t event_ = nullptr;
  bool recorded_ = false;
};

}  // namespace distrun::nccl
