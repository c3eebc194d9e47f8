// A job whose ranks fall out of step, for the flight recorder's test. Every rank joins (init
// ends with a barrier: collective #1), runs three all_reduces (#2 to #4), then collective #5:
//   op:   rank 3 calls all_gather while the others call all_reduce;
//   skip: rank 2 never enters it (it sleeps), the others call all_reduce.
// Usage: distrun-test-mismatch op|skip TIMEOUT_MS   (run under distrun)
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "distrun/comm/process_group.hpp"
#include "distrun/core/error.hpp"

int main(int argc, char** argv) {
  using namespace distrun;
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s op|skip TIMEOUT_MS\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[1];
  try {
    InitOptions o;
    o.timeout = std::chrono::milliseconds(std::atol(argv[2]));
    auto pg = ProcessGroup::init(o);
    Tensor t = Tensor::empty({256}, DType::Float32);
    for (int i = 0; i < 3; ++i) pg->backend().all_reduce(t, {});
    if (mode == "op" && pg->rank() == 3) {
      Tensor out = Tensor::empty({256 * pg->size()}, DType::Float32);
      pg->backend().all_gather(t, out, {});
    } else if (mode == "skip" && pg->rank() == 2) {
      sleep(120);  // stopped by distrun once the others fail
    } else {
      pg->backend().all_reduce(t, {});
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "distrun: error: %s\n", e.what());
    return exit_code(e);
  }
}
