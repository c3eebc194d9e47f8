// The rule that picks a rank's CUDA device (pure: runs in the CPU suite, without CUDA).
#include <catch2/catch.hpp>

#include "distrun/core/error.hpp"
#include "distrun/nccl/device_choice.hpp"

using distrun::ConfigError;
using distrun::nccl::DeviceChoice;
using Catch::Matchers::Contains;

namespace {

int choose(int local_rank, int local_world_size, int visible, int gpus_per_task = 0, std::string mask = "",
           bool exclusive = true, bool same_view = false) {
  DeviceChoice c;
  c.same_view = same_view;
  c.local_rank = local_rank;
  c.local_world_size = local_world_size;
  c.visible = visible;
  c.gpus_per_task = gpus_per_task;
  c.visible_devices = std::move(mask);
  c.exclusive = exclusive;
  return distrun::nccl::choose_cuda_device(c, "cudaGetDeviceCount: 0 devices");
}

}  // namespace

TEST_CASE("every rank sees all GPUs: the device is the local rank", "[nccl][device]") {
  for (int r = 0; r < 8; ++r) CHECK(choose(r, 8, 8) == r);
  CHECK(choose(1, 2, 8) == 1);  // fewer ranks than GPUs
}

TEST_CASE("one GPU bound per task (SLURM, CUDA_VISIBLE_DEVICES): every rank takes device 0", "[nccl][device]") {
  for (int r = 0; r < 8; ++r) CHECK(choose(r, 8, 1) == 0);
  for (int r = 0; r < 4; ++r) CHECK(choose(r, 4, 1, 1) == 0);  // srun --gpus-per-task=1
}

TEST_CASE("two GPUs bound per task: 4 ranks each take the first of their own pair", "[nccl][device]") {
  // srun --ntasks-per-node=4 --gpus-per-task=2: each rank sees its own 2 of the node's 8.
  for (int r = 0; r < 4; ++r) CHECK(choose(r, 4, 2, 2) == 0);
  // Without SLURM saying so, 4 ranks seeing the same 2 devices would share them: refused.
  CHECK_THROWS_WITH(choose(3, 4, 2), Contains("4 ranks on this node but only 2") && Contains("share a GPU"));
}

TEST_CASE("a subset per rank: local rank modulo the visible count", "[nccl][device]") {
  CHECK(choose(0, 2, 2) == 0);
  CHECK(choose(1, 2, 2) == 1);
  CHECK(choose(5, 4, 4) == 1);  // LOCAL_RANK beyond the node's count, wrapped
}

TEST_CASE("Gloo may share a device: more ranks than GPUs wrap around", "[nccl][device]") {
  CHECK(choose(5, 8, 4, 0, "", /*exclusive=*/false) == 1);
  CHECK(choose(1, 2, 1, 0, "MIG-4f1e2a7c-0b1d-5a3e-9c1f-0123456789ab", false) == 0);
}

TEST_CASE("MIG instances are named when NCCL would refuse them", "[nccl][device]") {
  const std::string mig = "MIG-4f1e2a7c-0b1d-5a3e-9c1f-0123456789ab";
  CHECK_THROWS_WITH(choose(1, 2, 1, 1, mig), Contains("MIG instances") && Contains("Duplicate GPU") && Contains(mig));
  CHECK_THROWS_AS(choose(0, 2, 1, 0, "0," + mig), ConfigError);
  CHECK(choose(0, 1, 1, 0, mig) == 0);  // one rank on one instance is fine
}

TEST_CASE("no device, a negative rank, or ranks sharing a GPU are ConfigErrors (exit 2)", "[nccl][device]") {
  CHECK_THROWS_WITH(choose(0, 1, 0), Contains("no CUDA device is visible (cudaGetDeviceCount: 0 devices)"));
  CHECK_THROWS_AS(choose(-1, 1, 2), ConfigError);
  CHECK_THROWS_WITH(choose(5, 8, 4), Contains("8 ranks on this node but only 4") && Contains("share a GPU"));
}

TEST_CASE("a launcher's workers share its view: two on its one GPU are refused before NCCL", "[nccl][device]") {
  // Each worker alone cannot tell one GPU for all from one of its own; the launcher can.
  CHECK_THROWS_WITH(choose(0, 2, 1, 0, "", true, /*same_view=*/true),
                    Contains("2 ranks on this node but only 1") && Contains("share a GPU"));
  // Under srun --gpus-per-task=1 the launcher's workers still share the one GPU of its task.
  CHECK_THROWS_AS(choose(0, 2, 1, 1, "", true, true), ConfigError);
  CHECK(choose(0, 1, 1, 0, "", true, true) == 0);
  CHECK(choose(0, 4, 1, 0, "", /*exclusive=*/false, true) == 0);  // Gloo may share it
}
