// Ring collectives over Gloo's point-to-point buffers: reduce_scatter and all_reduce as NCCL's
// ring does them. Every rank sends 2(n-1)/n of the data for all_reduce, (n-1)/n for
// reduce_scatter, and each block moves in segments so that reducing one segment overlaps
// receiving the next. Gloo's own allreduce is slower at the sizes we measure (see
// docs/performance.md); these also avoid copying the input.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "distrun/backend/reduce_kernels.hpp"

namespace gloo {
class Context;
}

namespace distrun {

struct RingPlan {
  gloo::Context* context;
  int rank;
  int size;
  uint64_t slot;                        // unique to this operation
  std::chrono::milliseconds timeout;    // per step
  ReduceFn reduce;
  size_t element_size;
  size_t segment_bytes = size_t(1) << 20;
};

/// In place over `data` (count elements): block b is elements [b*ceil(count/n), ...). After
/// it, every rank holds the elementwise reduction.
void ring_all_reduce(const RingPlan& plan, void* data, size_t count);

/// Block `rank` (of `size` equal blocks of `block_bytes`) of the reduction of every rank's
/// `input` into `output`; `input` is not modified. `scratch` holds 2 * block_bytes.
void ring_reduce_scatter(const RingPlan& plan, const void* input, void* output, size_t block_bytes, void* scratch);

}  // namespace distrun
