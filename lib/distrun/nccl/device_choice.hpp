// Which CUDA device a rank uses: one rule for the NCCL backend, Gloo with `--device cuda`,
// distrun-bench and the launcher's `--nproc-per-node gpu`, written as a pure function of what
// the rank knows so that it is tested without CUDA (no CUDA header here).
//
// The device is LOCAL_RANK modulo the number of devices this process sees. The CUDA runtime
// numbers only the visible devices (CUDA_VISIBLE_DEVICES, or a cgroup), 0..count-1, so:
//  - a node where every rank sees all 8 GPUs: local ranks 0..7 take devices 0..7;
//  - SLURM binding GPUs per task (`srun --gpus-per-task=G`, which implies
//    `--gpu-bind=per_task:G` and sets SLURM_GPUS_PER_TASK; or a per-task CUDA_VISIBLE_DEVICES):
//    each rank sees its own G devices and takes the first, device 0;
// More ranks than visible devices, when the ranks share what they see, would put two ranks of
// one communicator on one GPU, which NCCL refuses ("Duplicate GPU detected"), as it refuses
// several MIG instances of one GPU: both refused here (`exclusive`), naming the numbers. Gloo
// may share a device (`exclusive` false).
#pragma once
#include <string>

namespace distrun::nccl {

struct DeviceChoice {
  int local_rank = 0;
  int local_world_size = 1;
  int visible = 0;              // devices this process sees (cudaGetDeviceCount)
  int gpus_per_task = 0;        // SLURM_GPUS_PER_TASK: each rank sees its own devices; 0 when unset
  std::string visible_devices;  // CUDA_VISIBLE_DEVICES as set ("" when unset)
  bool exclusive = true;        // one rank per GPU (NCCL)
  // Every rank of the node sees the same devices (a launcher's workers inherit its view), so
  // one visible device is one GPU for all of them; else (a rank alone) it may be its own.
  bool same_view = false;
};

/// The device index for `c`. ConfigError for no device, a negative local rank, ranks that would
/// share a GPU or several MIG instances under `exclusive`; `why_none` completes the no-device
/// message (what is missing: library, driver, device).
int choose_cuda_device(const DeviceChoice& c, const std::string& why_none = "");

/// For a launcher about to start `ranks` workers of one node on NCCL: ConfigError, naming the
/// numbers, when they would share a GPU (they all see what this process sees), or when none
/// is visible.
void check_launch_fits_devices(int ranks);

/// Fills a DeviceChoice for this process from the environment (SLURM_GPUS_PER_TASK,
/// CUDA_VISIBLE_DEVICES) and the CUDA runtime's count, and chooses: the device of `local_rank`
/// for NCCL (`exclusive`) or Gloo. ConfigError when no device is usable, saying what is missing
/// (the CUDA runtime, the driver or its version, a device) and how to get it; the same in a
/// build without CUDA support.
int cuda_device_for_local_rank(int local_rank, int local_world_size, bool exclusive);

/// The CUDA devices this process sees (CUDA_VISIBLE_DEVICES and cgroups honoured); 0 without
/// CUDA, and then `why` (when given) says what is missing.
int count_visible_cuda_devices(std::string* why = nullptr);

}  // namespace distrun::nccl
