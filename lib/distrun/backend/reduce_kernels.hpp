// Elementwise reduction kernels, one per (dtype, op), with the signature Gloo expects.
// The 16-bit floats are widened to float32 for the arithmetic and rounded back. min and max
// propagate NaN (torch.minimum, torch.maximum). On bool they are logical, as torch's bool
// arithmetic: sum and max are or, prod and min are and; avg is refused.
#pragma once
#include <cstddef>

#include "distrun/backend/types.hpp"
#include "distrun/core/tensor.hpp"

namespace distrun {

/// out[i] = a[i] (op) b[i] for n elements (out may alias a or b).
using ReduceFn = void (*)(void* out, const void* a, const void* b, size_t n);

/// The kernel for `op` on `dtype`; Avg gives the Sum kernel (finish with divide_by()).
/// BackendError for a bitwise op on a floating type.
ReduceFn reduce_kernel(DType dtype, ReduceOp op);

/// Divides every element by `n` (ReduceOp::Avg after a sum, in the dtype: an integer sum has
/// wrapped as the dtype wraps); integers truncate toward zero, in int64 arithmetic, as NCCL's
/// ncclAvg does.
void divide_by(Tensor& t, int64_t n);

}  // namespace distrun
