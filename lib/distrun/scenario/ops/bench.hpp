// The bench step: nccl-tests-style timing of one collective over a range of sizes, a thin use
// of distrun-bench's engine (distrun/bench/): the same measurement, the same table and records.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "distrun/backend/backend.hpp"
#include "distrun/scenario/model/model.hpp"

namespace distrun::scenario {

/// nccl-tests' bus-bandwidth factor for `op` on `n` ranks.
double bus_factor(Op op, int n);
/// Whether the bench's `op` reduces (takes a reduction op), as its kind's form says.
bool bench_reduces(Op op);

/// Elements per rank buffer and the "size" nccl-tests reports for `bytes` requested:
/// collectives that split a buffer across ranks round the count down to a multiple of n.
struct BenchSize {
  int64_t count;  // elements in the reported size
  int64_t bytes;  // count * element size
};
BenchSize bench_size(Op op, int64_t bytes, size_t element_size, int n);

/// The DISTRUN_BENCH_MAX_BYTES cap (0: none): larger sizes are skipped, so the test suite can
/// run the bench configs quickly. ConfigError when it is not a size.
int64_t bench_max_bytes();

struct BenchContext {
  std::string scenario;
  int step = 0;
  std::string backend_name;
  Device device;
  bool check = true;
  DType dtype = DType::Float32;
  std::ostream* out = nullptr;  // rank 0 prints each row here as its size completes
};

struct BenchResult {
  std::vector<std::string> rows;  // JSON Lines records, one per size
  std::string table;              // the printed table (header and rows)
  int64_t wrong = 0;              // wrong elements over all sizes and ranks
};

/// Runs the bench on `b` (every member calls it); every member gets the same result. The step
/// measures the collective's native placement (in place for all_reduce, broadcast and reduce,
/// whose backend calls are in place; out of place for the others), the slowest rank's mean.
BenchResult run_bench(Backend& b, const BenchSpec& spec, const BenchContext& ctx);

}  // namespace distrun::scenario
