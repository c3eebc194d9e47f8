// Which CUDA devices this process can use. Asked before anything else in the NCCL backend, so
// that a machine without a GPU gets one clear sentence instead of a failure deep inside NCCL.
#pragma once
#include <string>

namespace distrun::nccl {

/// The number of visible CUDA devices; 0 when there are none or the runtime cannot tell, in
/// which case `why` (when given) receives the reason, e.g. "cudaGetDeviceCount: no CUDA-capable
/// device is detected" or "cudaGetDeviceCount: 0 devices".
int visible_cuda_devices(std::string* why = nullptr);

/// Throws BackendError unless CUDA device `device` is visible: "backend nccl: no CUDA device is
/// visible (cudaGetDeviceCount: ...)", or that the index is out of range.
void require_cuda_device(int device);

}  // namespace distrun::nccl
