// Which CUDA devices this process can use. Asked before anything else that touches CUDA, so
// that a machine without a GPU, without the CUDA runtime or with a driver too old gets one
// clear sentence (what is missing, how to get it) instead of a failure deep inside CUDA or NCCL.
#pragma once
#include <string>

namespace distrun::nccl {

/// The number of visible CUDA devices; 0 when there are none or CUDA cannot be used, in which
/// case `why` (when given) says what is missing: the runtime library, the driver, a driver older
/// than the runtime, or a device (with CUDA_VISIBLE_DEVICES when it is set), and how to fix it.
int visible_cuda_devices(std::string* why = nullptr);

/// Throws ConfigError unless CUDA device `device` is visible: "no CUDA device is visible (...)",
/// or that the index is out of range.
void require_cuda_device(int device);

}  // namespace distrun::nccl
