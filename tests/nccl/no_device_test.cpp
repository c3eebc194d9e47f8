// Without a CUDA device, NcclBackend fails at once with one clear sentence, before any
// rendezvous (so a rank never waits for peers that will fail the same way).
#include <catch2/catch.hpp>

#include "distrun/comm/process_group.hpp"
#include "distrun/core/error.hpp"
#include "distrun/nccl/cuda_device.hpp"
#include "distrun/nccl/nccl_backend.hpp"
#include "distrun/store/hash_store.hpp"

using namespace distrun;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

TEST_CASE("the device count is 0 and the reason names cudaGetDeviceCount", "[nccl]") {
  std::string why;
  CHECK(nccl::visible_cuda_devices(&why) == 0);
  CHECK_THAT(why, StartsWith("cudaGetDeviceCount: "));
}

TEST_CASE("constructing NcclBackend without a device is a clear BackendError", "[nccl]") {
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
    } catch (const BackendError& e) {
      CHECK_THAT(e.what(), StartsWith("backend nccl: no CUDA device is visible (cudaGetDeviceCount: "));
    }
  }
  CHECK_FALSE(store->check({"nccl/uid/0"}));  // nothing was published
}

TEST_CASE("require_cuda_device gives the same sentence for any device index", "[nccl]") {
  CHECK_THROWS_WITH(nccl::require_cuda_device(3), Contains("no CUDA device is visible"));
}

TEST_CASE("init_process_group with backend nccl fails the same way, as exit status 1", "[nccl]") {
  InitOptions o;
  o.backend = parse_backend("nccl");
  o.world = WorldInfo{};  // a world of one, meeting through an in-process store
  try {
    ProcessGroup::init(o);
    FAIL("a process group was made without a device");
  } catch (const std::exception& e) {
    CHECK_THAT(e.what(), Contains("backend nccl: no CUDA device is visible"));
    CHECK(exit_code(e) == 1);
  }
}
