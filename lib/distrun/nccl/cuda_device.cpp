#include "distrun/nccl/cuda_device.hpp"

#include <cuda_runtime_api.h>

#include <cstdlib>

#include "distrun/core/error.hpp"
#include "distrun/nccl/cuda_library.hpp"

namespace distrun::nccl {

namespace {

// "13.0" for CUDA's 13000.
std::string cuda_version(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

// Why no device can be used, "" when the runtime has nothing to object to.
std::string missing_before_devices() {
  try {
    load_cuda_library(CudaLibrary::Runtime);
  } catch (const ConfigError& e) {
    return e.what();
  }
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);  // 0 when no driver is installed
  cudaRuntimeGetVersion(&runtime);
  if (driver == 0)
    return "no NVIDIA driver is loaded (libcuda.so.1 or the kernel module is missing): install the NVIDIA driver for "
           "CUDA " +
           cuda_version(runtime) + " or newer";
  if (driver < runtime)
    return "the NVIDIA driver supports CUDA " + cuda_version(driver) + ", older than the CUDA runtime distrun uses (" +
           cuda_version(runtime) + "): install a driver for CUDA " + cuda_version(runtime) + " or newer";
  return "";
}

}  // namespace

int visible_cuda_devices(std::string* why) {
  if (std::string missing = missing_before_devices(); !missing.empty()) {
    if (why) *why = missing;
    return 0;
  }
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    // Clears the sticky "last error", so that a later CUDA call is not blamed for this one.
    if (e != cudaSuccess) cudaGetLastError();
    if (why) {
      const char* mask = std::getenv("CUDA_VISIBLE_DEVICES");
      *why = std::string("cudaGetDeviceCount: ") + (e != cudaSuccess ? cudaGetErrorString(e) : "0 devices") +
             (mask ? std::string("; CUDA_VISIBLE_DEVICES=") + mask : std::string());
    }
    return 0;
  }
  return count;
}

void require_cuda_device(int device) {
  std::string why;
  const int count = visible_cuda_devices(&why);
  if (count == 0) throw ConfigError("no CUDA device is visible (" + why + ")");
  if (device < 0 || device >= count)
    throw ConfigError("CUDA device " + std::to_string(device) + " does not exist (" + std::to_string(count) +
                      " visible)");
}

}  // namespace distrun::nccl
