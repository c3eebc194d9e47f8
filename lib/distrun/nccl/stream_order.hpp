// Orders an NCCL stream after the work that produced its tensors. Every producer of tensor data
// in distrun (Tensor::zeros' cudaMemset, clone/to/copy_from/slices' cudaMemcpy2D, the runner's
// and bench's host-to-device copies, which are asynchronous copies from the pinned staging buffer,
// host_staging.hpp) runs on the legacy default stream, and the backend's streams are
// created cudaStreamNonBlocking so that they do not serialise with everything else: without an
// explicit edge a collective could read its input before the copy landed, and a later memset
// could land after NCCL wrote the result. The edge is an event recorded on the *legacy* default
// stream (cudaStreamLegacy, whichever default-stream mode the caller was compiled with): work on
// the legacy stream waits for all earlier work of every blocking stream of the device, per-thread
// default streams included, so the event completes only after every producer issued so far.
// The other direction (consumers after NCCL) is the host's wait for the operation's own event.
#pragma once
#include <cuda_runtime_api.h>

#include "distrun/nccl/nccl_check.hpp"

namespace distrun::nccl {

/// Makes `stream` wait (on the device, not the host) for every earlier producer; `scratch` is
/// an event owned by the caller, reused call after call.
inline void order_after_producers(cudaStream_t stream, cudaEvent_t scratch) {
  DISTRUN_CUDA_CHECK(cudaEventRecord(scratch, cudaStreamLegacy));
  DISTRUN_CUDA_CHECK(cudaStreamWaitEvent(stream, scratch, 0));
}

}  // namespace distrun::nccl
