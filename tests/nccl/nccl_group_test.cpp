// The group guard closes an NCCL group on every path. Needs libnccl but no device: group calls
// without operations touch no GPU.
#include <catch2/catch.hpp>

#include <stdexcept>

#include "distrun/nccl/nccl_group.hpp"

using distrun::nccl::NcclGroup;

namespace {

// True when this thread has no NCCL group open: a bare ncclGroupEnd is then refused.
bool no_group_open() { return ncclGroupEnd() == ncclInvalidUsage; }

}  // namespace

TEST_CASE("a group closed by end() leaves no group open", "[nccl]") {
  REQUIRE(no_group_open());
  {
    NcclGroup g;
    CHECK(g.end() == ncclSuccess);
  }
  CHECK(no_group_open());
}

TEST_CASE("a throw inside a group still closes it", "[nccl]") {
  REQUIRE(no_group_open());
  try {
    NcclGroup g;
    throw std::runtime_error("an error between ncclGroupStart and ncclGroupEnd");
  } catch (const std::runtime_error&) {
  }
  // Without the guard the depth stays 1: this ncclGroupEnd would succeed (closing the leaked
  // group) instead of being refused.
  CHECK(no_group_open());
}
