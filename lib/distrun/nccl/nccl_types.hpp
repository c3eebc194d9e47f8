// Translation of distrun's element types and reduction operators into NCCL's. Pure functions,
// usable (and tested) without a device.
#pragma once
#include <nccl.h>

#include "distrun/backend/types.hpp"
#include "distrun/core/dtype.hpp"

namespace distrun::nccl {

/// NCCL's type for `dtype` (bfloat16 -> ncclBfloat16, bool -> ncclUint8 as torch maps it, ...).
/// NCCL has no 16-bit integer: int16 is a ConfigError naming it.
ncclDataType_t nccl_dtype(DType dtype);

/// NCCL's operator for `reduce` on `dtype` (avg -> ncclAvg; on bool, carried as uint8, sum ->
/// ncclMax and prod -> ncclMin, as torch does, so a result stays 0 or 1). band/bor/bxor have
/// none: BackendError naming `op` (the collective) and the operator.
ncclRedOp_t nccl_reduce_op(ReduceOp reduce, DType dtype, const char* op);

}  // namespace distrun::nccl
