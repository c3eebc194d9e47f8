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
    case DType::Bool: return ncclUint8;
    case DType::Int16: break;
  }
  throw ConfigError(nccl_dtype_refusal(dtype).value_or("backend nccl has no type for this dtype"));
}

ncclRedOp_t nccl_reduce_op(ReduceOp reduce, DType dtype, const char* op) {
  if (auto why = reduce_op_refusal(reduce, dtype)) throw BackendError(*why + " in " + op);
  if (auto why = nccl_reduce_refusal(reduce)) throw BackendError(*why + " in " + op);
  const bool logical = dtype == DType::Bool;
  switch (reduce) {
    case ReduceOp::Sum: return logical ? ncclMax : ncclSum;
    case ReduceOp::Prod: return logical ? ncclMin : ncclProd;
    case ReduceOp::Min: return ncclMin;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Avg: return ncclAvg;
    case ReduceOp::BAnd:
    case ReduceOp::BOr:
    case ReduceOp::BXor: break;  // refused above
  }
  throw BackendError(std::string("backend nccl: no operator for reduce op '") + reduce_op_name(reduce) + "' in " + op);
}

}  // namespace distrun::nccl
