// Catch2 main for the test binaries that depend on whether a CUDA device is visible. Built
// twice: with DISTRUN_TEST_NEEDS_DEVICE=1 (GPU tests: skip without a device) and =0 (tests of
// the no-device error: skip when a device is there). A skip prints its reason and exits 77,
// which CTest reports as skipped (SKIP_RETURN_CODE), never as passed.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>

#include "distrun/nccl/cuda_device.hpp"

int main(int argc, char* argv[]) {
  std::string why;
  const int devices = distrun::nccl::visible_cuda_devices(&why);
#if DISTRUN_TEST_NEEDS_DEVICE
  if (devices == 0) {
    std::printf("SKIP: no CUDA device is visible (%s); the GPU tests need one\n", why.c_str());
    return 77;
  }
#else
  if (devices > 0) {
    std::printf("SKIP: %d CUDA device(s) visible; this test checks the error when there is none\n", devices);
    return 77;
  }
#endif
  return Catch::Session().run(argc, argv);
}
