#include "distrun/nccl/cuda_device.hpp"

#include <cuda_runtime_api.h>

#include "distrun/core/error.hpp"

namespace distrun::nccl {

int visible_cuda_devices(std::string* why) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    // Clears the sticky "last error", so that a later CUDA call is not blamed for this one.
    cudaGetLastError();
    if (why) *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
    return 0;
  }
  if (count == 0 && why) *why = "cudaGetDeviceCount: 0 devices";
  return count;
}

void require_cuda_device(int device) {
  std::string why;
  const int count = visible_cuda_devices(&why);
  if (count == 0) throw BackendError("backend nccl: no CUDA device is visible (" + why + ")");
  if (device < 0 || device >= count)
    throw BackendError("backend nccl: CUDA device " + std::to_string(device) + " does not exist (" +
                       std::to_string(count) + " visible)");
}

}  // namespace distrun::nccl
