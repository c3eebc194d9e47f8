// libFuzzer target: SLURM hostlist expansion over arbitrary strings, bounded output.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "distrun/core/error.hpp"
#include "distrun/env/hostlist.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string in(reinterpret_cast<const char*>(data), size);
  try {
    auto hosts = distrun::expand_hostlist(in, 4096);
    if (hosts.empty() || hosts.size() > 4096) std::abort();
    for (const auto& h : hosts)
      if (h.empty()) std::abort();
  } catch (const distrun::ConfigError&) {
  }
  return 0;
}
