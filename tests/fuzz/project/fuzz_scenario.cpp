// libFuzzer target: the scenario loader and validator over arbitrary bytes (YAML or not,
// UTF-8 or not). Any outcome but a ConfigError or success is a bug.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "distrun/core/error.hpp"
#include "distrun/scenario/api.hpp"

// The validation holds a world's tensors; a host of 256 MiB keeps an input that asks for
// more (but fits the real host) a ConfigError rather than libFuzzer's out-of-memory kill.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("DISTRUN_HOST_MEMORY", "256M", 0);
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
      distrun::check_scenario_file(path, world);
    } catch (const distrun::ConfigError&) {
    }
  }
  return 0;
}
