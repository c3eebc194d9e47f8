// Which CUDA device a rank uses, as a pure function of what it knows, so that the rule is
// tested on machines without a GPU (and compiled without CUDA: no CUDA header here).
//
// The device is LOCAL_RANK modulo the number of devices this process sees. The CUDA runtime
// numbers only the visible devices (CUDA_VISIBLE_DEVICES, or a cgroup), 0..count-1, so:
//  - a node where every rank sees all 8 GPUs: local ranks 0..7 take devices 0..7;
//  - SLURM binding one GPU per task (--gpus-per-task=1, --gpu-bind=single:1 or per-task
//    CUDA_VISIBLE_DEVICES): every rank sees exactly one device and takes device 0 (before this
//    rule, local rank 3 asked for "device 3" and failed with "does not exist");
//  - a launcher giving each rank a pair of GPUs: local rank r takes r % 2 of its own pair.
// More ranks than visible devices, when each sees several, would put two ranks of one
// communicator on one GPU, which NCCL refuses ("Duplicate GPU detected"): refused here, with
// the numbers.
#pragma once
#include <string>

#include "distrun/core/error.hpp"

namespace distrun::nccl {

/// The device index for `local_rank` of `local_world_size` ranks on this node, when `visible`
/// devices are visible. BackendError for no device, a negative local rank, or ranks that would
/// share a device.
inline int choose_cuda_device(int local_rank, int local_world_size, int visible) {
  if (visible <= 0) throw BackendError("backend nccl: no CUDA device is visible");
  if (local_rank < 0) throw BackendError("backend nccl: LOCAL_RANK " + std::to_string(local_rank) + " is negative");
  if (visible > 1 && local_world_size > visible)
    throw BackendError("backend nccl: " + std::to_string(local_world_size) + " ranks on this node but only " +
                       std::to_string(visible) +
                       " CUDA devices visible to each: ranks would share a GPU, which NCCL refuses; run at most " +
                       std::to_string(visible) + " ranks per node, or bind one GPU per rank (CUDA_VISIBLE_DEVICES, "
                       "srun --gpus-per-task=1)");
  return local_rank % visible;
}

}  // namespace distrun::nccl
