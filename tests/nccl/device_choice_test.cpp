// The rule that picks a rank's CUDA device (pure: runs in the CPU suite, without CUDA).
#include <catch2/catch.hpp>

#include "distrun/core/error.hpp"
#include "distrun/nccl/device_choice.hpp"

using distrun::BackendError;
using distrun::nccl::choose_cuda_device;
using Catch::Matchers::Contains;

TEST_CASE("every rank sees all GPUs: the device is the local rank", "[nccl][device]") {
  for (int r = 0; r < 8; ++r) CHECK(choose_cuda_device(r, 8, 8) == r);
  CHECK(choose_cuda_device(1, 2, 8) == 1);  // fewer ranks than GPUs
}

TEST_CASE("one GPU bound per task (SLURM, CUDA_VISIBLE_DEVICES): every rank takes device 0", "[nccl][device]") {
  // The defect: local rank 3 of 8 with one visible device asked for device 3.
  for (int r = 0; r < 8; ++r) CHECK(choose_cuda_device(r, 8, 1) == 0);
}

TEST_CASE("a subset per rank: local rank modulo the visible count", "[nccl][device]") {
  CHECK(choose_cuda_device(0, 2, 2) == 0);
  CHECK(choose_cuda_device(1, 2, 2) == 1);
  CHECK(choose_cuda_device(5, 4, 4) == 1);  // LOCAL_RANK beyond the node's count, wrapped
}

TEST_CASE("no device, a negative rank, or ranks sharing a GPU are clear errors", "[nccl][device]") {
  CHECK_THROWS_WITH(choose_cuda_device(0, 1, 0), Contains("no CUDA device is visible"));
  CHECK_THROWS_AS(choose_cuda_device(-1, 1, 2), BackendError);
  CHECK_THROWS_WITH(choose_cuda_device(5, 8, 4), Contains("8 ranks on this node but only 4") && Contains("share a GPU"));
}
