// Translation of distrun's element types and reduction operators into NCCL's. Pure functions,
// usable (and tested) without a device.
#pragma once
#include <nccl.h>

#include "distrun/backend/types.hpp"
#include "distrun/core/dtype.hpp"

namespace distrun::nccl {

/// NCCL's type for `dtype` (bfloat16 -> ncclBfloat16, ...). Every DType has one.
ncclDataType_t nccl_dtype(DType dtype);

/// NCCL's operator for `reduce` (avg -> ncclAvg). band/bor/bxor have none: BackendError naming
/// `op` (the collective) and the operator, so a scenario asking for them fails clearly.
ncclRedOp_t nccl_reduce_op(ReduceOp reduce, const char* op);

}  // namespace distrun::nccl
