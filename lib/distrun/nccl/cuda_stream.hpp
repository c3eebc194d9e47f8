// A CUDA stream owned by whoever holds the last reference: the backend and every Work of the
// operations launched on it share one, so a Work outliving its backend still has its stream.
#pragma once
#include <cuda_runtime_api.h>

#include "distrun/nccl/nccl_check.hpp"

namespace distrun::nccl {

class CudaStream {
 public:
  /// Non-blocking: unrelated default-stream work does not serialise with it; the producers of
  /// its inputs are waited for explicitly (stream_order.hpp).
  CudaStream() { DISTRUN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  // Destroying a stream with work pending is allowed: CUDA releases it once the work is done.
  ~CudaStream() { cudaStreamDestroy(stream_); }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

}  // namespace distrun::nccl
