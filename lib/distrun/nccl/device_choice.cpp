#include "distrun/nccl/device_choice.hpp"

#include <cstdlib>

#include "distrun/config.hpp"
#include "distrun/core/error.hpp"
#if DISTRUN_HAVE_NCCL
#include "distrun/nccl/cuda_device.hpp"
#endif

namespace distrun::nccl {

namespace {

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// MIG instances are named MIG-<uuid> (or MIG-GPU-<uuid>/<gi>/<ci> before CUDA 11.1).
bool names_mig(const std::string& visible_devices) {
  return visible_devices.rfind("MIG-", 0) == 0 || visible_devices.find(",MIG-") != std::string::npos;
}

}  // namespace

int choose_cuda_device(const DeviceChoice& c, const std::string& why_none) {
  if (c.visible <= 0)
    throw ConfigError("no CUDA device is visible" + (why_none.empty() ? std::string() : " (" + why_none + ")"));
  if (c.local_rank < 0) throw ConfigError("LOCAL_RANK " + std::to_string(c.local_rank) + " is negative");
  const bool own_devices = !c.same_view && c.gpus_per_task > 0 && c.visible == c.gpus_per_task;
  if (c.exclusive && c.local_world_size > 1 && names_mig(c.visible_devices))
    throw ConfigError(std::to_string(c.local_world_size) +
                      " ranks on this node on MIG instances (CUDA_VISIBLE_DEVICES=" + c.visible_devices +
                      "): NCCL counts the MIG instances of one GPU as one device and refuses "
                      "them (\"Duplicate GPU detected\"); run one rank per physical GPU, or use backend gloo");
  if (own_devices) return 0;
  if (c.exclusive && (c.visible > 1 || c.same_view) && c.local_world_size > c.visible)
    throw ConfigError(std::to_string(c.local_world_size) + " ranks on this node but only " + std::to_string(c.visible) +
                      " CUDA device(s) visible to each: ranks would share a GPU, which NCCL refuses; run at most " +
                      std::to_string(c.visible) +
                      " ranks per node, or bind GPUs per rank (srun --gpus-per-task, CUDA_VISIBLE_DEVICES)");
  return c.local_rank % c.visible;
}

int count_visible_cuda_devices(std::string* why) {
#if DISTRUN_HAVE_NCCL
  return visible_cuda_devices(why);
#else
  if (why)
    *why = "this build of distrun has no CUDA support (configure it where the CUDA toolkit and NCCL are installed)";
  return 0;
#endif
}

namespace {

DeviceChoice this_process(int local_rank, int local_world_size, bool exclusive, std::string* why) {
  DeviceChoice c;
  c.local_rank = local_rank;
  c.local_world_size = local_world_size;
  c.visible = count_visible_cuda_devices(why);
  c.gpus_per_task = std::atoi(env_or_empty("SLURM_GPUS_PER_TASK").c_str());
  c.visible_devices = env_or_empty("CUDA_VISIBLE_DEVICES");
  c.exclusive = exclusive;
  return c;
}

}  // namespace

int cuda_device_for_local_rank(int local_rank, int local_world_size, bool exclusive) {
  std::string why;
  return choose_cuda_device(this_process(local_rank, local_world_size, exclusive, &why), why);
}

void check_launch_fits_devices(int ranks) {
  std::string why;
  DeviceChoice c = this_process(0, ranks, /*exclusive=*/true, &why);
  c.same_view = true;
  choose_cuda_device(c, why);
}

}  // namespace distrun::nccl
