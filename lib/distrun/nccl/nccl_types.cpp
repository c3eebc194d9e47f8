#include "distrun/nccl/nccl_types.hpp"

#include <string>

#include "distrun/core/error.hpp"

namespace distrun::nccl {

ncclDataType_t nccl_dtype(DType dtype) {
  switch (dtype) {
    case DType::Float32: return ncclFloat32;
    case DType::Float64: return ncclFloat64;
    case DType::Float16: return ncclFloat16;
    case DType::BFloat16: return ncclBfloat16;
    case DType::Int8: return ncclInt8;
    case DType::UInt8: return ncclUint8;
    case DType::Int32: return ncclInt32;
    case DType::Int64: return ncclInt64;
  }
  throw BackendError("backend nccl: no NCCL type for dtype " + std::to_string(int(dtype)));
}

ncclRedOp_t nccl_reduce_op(ReduceOp reduce, const char* op) {
  switch (reduce) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Prod: return ncclProd;
    case ReduceOp::Min: return ncclMin;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Avg: return ncclAvg;
    case ReduceOp::BAnd:
    case ReduceOp::BOr:
    case ReduceOp::BXor: break;
  }
  // NCCL has no bitwise reductions (torch refuses them on NCCL too); use backend gloo.
  throw BackendError(std::string("backend nccl does not support reduce op '") + reduce_op_name(reduce) + "' in " + op +
                     " (NCCL has sum, avg, prod, min and max; use backend gloo for band/bor/bxor)");
}

}  // namespace distrun::nccl
