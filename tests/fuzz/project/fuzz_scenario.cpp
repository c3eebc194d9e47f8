// libFuzzer target: the scenario loader and validator over arbitrary bytes (YAML or not,
// UTF-8 or not). Any outcome but a ConfigError or success is a bug. A file that validates is
// also simulated, for the whole world and for each rank alone (what a worker computes): a
// rank's own expected results must be the whole world's.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "distrun/core/error.hpp"
#include "distrun/scenario/run/api.hpp"
#include "distrun/scenario/output/json_values.hpp"
#include "distrun/scenario/load/loader.hpp"
#include "distrun/scenario/check/reference.hpp"

namespace {
// Aliases let 4 KiB list a thousand steps, each simulated 1 + world times below (256 uint8
// all_reduce steps of 16 KiB took 2.8 s, 64 took 0.8 s); past 64 an input is validated only.
constexpr size_t kMaxComparedSteps = 64;

void require_own_matches_whole(const std::string& path, int world) {
  using namespace distrun::scenario;
  Scenario whole_sc = load_scenario(path);
  if (whole_sc.steps.size() > kMaxComparedSteps) return;
  const Reference whole(whole_sc, world, world);
  for (int rank = 0; rank < world; ++rank) {
    Scenario sc = load_scenario(path);
    const Reference own(sc, world, world, rank);
    for (const auto& s : sc.steps) {
      const Expected& a = whole.expected(s.index, rank);
      const Expected& b = own.expected(s.index, rank);
      bool same = a.has_result == b.has_result && a.object.has_value() == b.object.has_value() &&
                  (!a.object || same_json(*a.object, *b.object)) &&
                  a.tensor.value.defined() == b.tensor.value.defined();
      if (same && a.tensor.value.defined())
        same = a.tensor.value.shape() == b.tensor.value.shape() && a.tensor.value.dtype() == b.tensor.value.dtype() &&
               a.tensor.ulps == b.tensor.ulps && a.tensor.scale == b.tensor.scale &&
               std::memcmp(a.tensor.value.data(), b.tensor.value.data(), a.tensor.value.nbytes()) == 0;
      if (!same) {
        std::fprintf(stderr, "step %d on rank %d: the rank's own reference differs from the whole world's\n", s.index,
                     rank);
        std::abort();
      }
    }
  }
}
}  // namespace

// The fuzzer hunts for wrong logic, not for the cost of large scenarios, and one input must
// finish inside -timeout under the instrumentation (about 150 ns an element). A host of
// 16 KiB makes any input that asks for more a ConfigError (the size checks still run,
// overflows included); at 256 MiB a legal [500, 100000] all_reduce took 33 s and 1.5 GiB.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("DISTRUN_HOST_MEMORY", "16K", 0);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/distrun-fuzz-scenario-" + std::to_string(getpid()) + ".yaml";
  if (FILE* f = std::fopen(path.c_str(), "wb")) {
    std::fwrite(data, 1, size, f);
    std::fclose(f);
  }
  for (int world : {1, 4}) {
    try {
      distrun::check_scenario(distrun::scenario::load_scenario(path), world);
      require_own_matches_whole(path, world);
    } catch (const distrun::ConfigError&) {
    }
  }
  return 0;
}
