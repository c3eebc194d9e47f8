// The intents every rank states before a collective: a disagreement is one typed error that
// names the ranks and the sizes.
#include <catch2/catch.hpp>

#include "distrun/backend/intent.hpp"

using namespace distrun;

TEST_CASE("mismatch messages name the ranks and the sizes", "[trust]") {
  auto intent = [](uint64_t bytes) {
    Intent i;
    i.kind = CollectiveKind::ReduceScatter;
    i.seq = 7;
    i.dtype = uint32_t(DType::Float32);
    i.op = uint32_t(ReduceOp::Sum);
    i.bytes = bytes;
    i.extent = bytes * 3;
    return i;
  };
  std::vector<Intent> all{intent(64), intent(64), intent(32)};
  // Global ranks of a subgroup: messages name those.
  CHECK_THROWS_WITH(check_agreement(all, true, {4, 5, 6}),
                    "reduce_scatter #7: the ranks disagree on the bytes per rank: rank 4 has 64 bytes, rank 6 has 32 "
                    "bytes");
  all[2] = intent(64);
  all[1].extent = 100;  // its buffer is shorter than the 192 bytes its peers will read
  CHECK_THROWS_WITH(check_agreement(all, true, {}),
                    "reduce_scatter #7: rank 1's buffer holds 100 bytes, but its peers would read 192");
  CHECK_NOTHROW(check_agreement(all, false, {}));  // TCP: no extents
  all[1].extent = 192;
  all[0].root = 3;
  all[1].root = all[2].root = 3;
  CHECK_THROWS_WITH(check_agreement(all, true, {}), "reduce_scatter #7: root 3 is not a rank of this group of 3");
}
