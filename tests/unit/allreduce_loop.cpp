// A rank of a multi-process test: joins the job from the environment (RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT) and runs all_reduce in a loop, checking every result.
// Usage: distrun-test-allreduce-loop ITERATIONS ELEMENTS TIMEOUT_MS [STOP_FILE]
// With STOP_FILE the ranks also stop, together, within 100 iterations of rank 0 seeing that
// file: a test that needs the ranks running until it has done something sizes their work by
// its own progress, not by a guess at the machine's speed.
// Prints "rank R: transport T" once joined and "rank R: ok" on success; on failure prints the error and exits 1.
#include <cstdio>
#include <cstdlib>
#include <string>

#include <unistd.h>

#include "distrun/comm/process_group.hpp"
#include "distrun/core/error.hpp"

int main(int argc, char** argv) {
  using namespace distrun;
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr, "usage: %s ITERATIONS ELEMENTS TIMEOUT_MS [STOP_FILE]\n", argv[0]);
    return 2;
  }
  const long iters = std::atol(argv[1]);
  const int64_t elements = std::atoll(argv[2]);
  try {
    InitOptions o;
    o.timeout = std::chrono::milliseconds(std::atol(argv[3]));
    auto pg = ProcessGroup::init(o);
    const int n = pg->size();
    std::printf("rank %d: transport %s\n", pg->rank(), pg->backend().transport_name().c_str());
    Tensor t = Tensor::empty({elements}, DType::Float32);
    Tensor stop = Tensor::empty({1}, DType::Float32);
    for (long it = 0; it < iters; ++it) {
      if (argc == 5 && it % 100 == 0) {
        stop.data_as<float>()[0] = pg->rank() == 0 && access(argv[4], F_OK) == 0 ? 1.0f : 0.0f;
        pg->backend().all_reduce(stop, {});
        if (stop.data_as<float>()[0] > 0) break;
      }
      float* p = t.data_as<float>();
      for (int64_t e = 0; e < elements; ++e) p[e] = float(pg->rank() + 1);
      pg->backend().all_reduce(t, {});
      const float want = float(n * (n + 1) / 2);
      for (int64_t e = 0; e < elements; ++e)
        if (p[e] != want)
          throw CheckError("all_reduce gave " + std::to_string(p[e]) + ", expected " + std::to_string(want));
      if (it == 0) std::printf("rank %d: first all_reduce done\n", pg->rank()), std::fflush(stdout);
    }
    std::printf("rank %d: ok %g\n", pg->rank(), double(t.data_as<float>()[0]));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "distrun: error: %s\n", e.what());
    return exit_code(e);
  }
}
