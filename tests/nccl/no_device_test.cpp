// Without a CUDA device, NcclBackend fails at once with one clear sentence saying what is
// missing (the driver, a driver recent enough, a device), before any rendezvous (so a rank never
// waits for peers that will fail the same way): a ConfigError, exit status 2.
#include <catch2/catch.hpp>

#include "distrun/comm/process_group.hpp"
#include "distrun/core/error.hpp"
#include "distrun/nccl/cuda_device.hpp"
#include "distrun/nccl/nccl_backend.hpp"
#include "distrun/store/hash_store.hpp"

using namespace distrun;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

TEST_CASE("the device count is 0 and the reason says what is missing", "[nccl]") {
  std::string why;
  CHECK(nccl::visible_cuda_devices(&why) == 0);
  // A host with the CUDA runtime but no driver (this suite's machines), one with a driver too old,
  // or one with a driver and no device.
  CHECK_THAT(why, StartsWith("no NVIDIA driver is loaded") || StartsWith("the NVIDIA driver supports CUDA") ||
                      StartsWith("cudaGetDeviceCount: "));
  CHECK_THAT(why, Contains("install") || StartsWith("cudaGetDeviceCount: "));
}

TEST_CASE("constructing NcclBackend without a device is a clear ConfigError", "[nccl]") {
  auto store = std::make_shared<HashStore>();
  NcclBackendOptions o;
  o.timeout = std::chrono::milliseconds(60000);
  o.device = 0;
  // Rank 1 of 2: were the device not checked first, it would wait for rank 0's unique id.
  for (int rank : {0, 1}) {
    try {
      NcclBackend backend(store, rank, 2, o);
      FAIL("NcclBackend was constructed without a device");
    } catch (const TimeoutError& e) {
      FAIL("waited for a rendezvous instead of checking the device: " << e.what());
    } catch (const ConfigError& e) {
      std::string why;
      nccl::visible_cuda_devices(&why);
      CHECK(std::string(e.what()) == "no CUDA device is visible (" + why + ")");
    }
  }
  CHECK_FALSE(store->check({"nccl/uid/0"}));  // nothing was published
}

TEST_CASE("require_cuda_device gives the same sentence for any device index", "[nccl]") {
  CHECK_THROWS_WITH(nccl::require_cuda_device(3), Contains("no CUDA device is visible"));
}

TEST_CASE("init_process_group with backend nccl fails the same way, as exit status 2", "[nccl]") {
  InitOptions o;
  o.backend = parse_backend("nccl");
  o.world = WorldInfo{};  // a world of one, meeting through an in-process store
  try {
    ProcessGroup::init(o);
    FAIL("a process group was made without a device");
  } catch (const std::exception& e) {
    CHECK_THAT(e.what(), StartsWith("no CUDA device is visible ("));
    CHECK(exit_code(e) == 2);
  }
}
