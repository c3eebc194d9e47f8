// DType -> ncclDataType_t and ReduceOp -> ncclRedOp_t, without a device.
#include <catch2/catch.hpp>

#include "distrun/core/error.hpp"
#include "distrun/nccl/nccl_types.hpp"

using namespace distrun;
using distrun::nccl::nccl_dtype;
using distrun::nccl::nccl_reduce_op;

TEST_CASE("every dtype maps to the NCCL type of the same width and kind", "[nccl]") {
  CHECK(nccl_dtype(DType::Float32) == ncclFloat32);
  CHECK(nccl_dtype(DType::Float64) == ncclFloat64);
  CHECK(nccl_dtype(DType::Float16) == ncclFloat16);
  CHECK(nccl_dtype(DType::BFloat16) == ncclBfloat16);
  CHECK(nccl_dtype(DType::Int8) == ncclInt8);
  CHECK(nccl_dtype(DType::UInt8) == ncclUint8);
  CHECK(nccl_dtype(DType::Int32) == ncclInt32);
  CHECK(nccl_dtype(DType::Int64) == ncclInt64);
}

TEST_CASE("arithmetic reductions map to NCCL operators, avg to ncclAvg", "[nccl]") {
  CHECK(nccl_reduce_op(ReduceOp::Sum, DType::Float32, "all_reduce") == ncclSum);
  CHECK(nccl_reduce_op(ReduceOp::Prod, DType::Float32, "all_reduce") == ncclProd);
  CHECK(nccl_reduce_op(ReduceOp::Min, DType::Float32, "all_reduce") == ncclMin);
  CHECK(nccl_reduce_op(ReduceOp::Max, DType::Float32, "all_reduce") == ncclMax);
  CHECK(nccl_reduce_op(ReduceOp::Avg, DType::Float32, "all_reduce") == ncclAvg);
}

TEST_CASE("bitwise reductions are refused with a message naming the op and the collective", "[nccl]") {
  for (ReduceOp op : {ReduceOp::BAnd, ReduceOp::BOr, ReduceOp::BXor}) {
    try {
      nccl_reduce_op(op, DType::Int32, "reduce_scatter");
      FAIL("no error for " << reduce_op_name(op));
    } catch (const BackendError& e) {
      std::string msg = e.what();
      CHECK(msg.find("backend nccl does not support") != std::string::npos);
      CHECK(msg.find(std::string("'") + reduce_op_name(op) + "'") != std::string::npos);
      CHECK(msg.find("reduce_scatter") != std::string::npos);
    }
  }
}

TEST_CASE("bool travels as uint8 with sum as max and prod as min, as torch maps it", "[nccl]") {
  CHECK(nccl_dtype(DType::Bool) == ncclUint8);
  CHECK(nccl_reduce_op(ReduceOp::Sum, DType::Bool, "all_reduce") == ncclMax);
  CHECK(nccl_reduce_op(ReduceOp::Prod, DType::Bool, "all_reduce") == ncclMin);
  CHECK(nccl_reduce_op(ReduceOp::Max, DType::Bool, "all_reduce") == ncclMax);
  CHECK_THROWS_AS(nccl_reduce_op(ReduceOp::Avg, DType::Bool, "all_reduce"), BackendError);
}

TEST_CASE("int16 has no NCCL type: a ConfigError naming it", "[nccl]") {
  try {
    nccl_dtype(DType::Int16);
    FAIL("no error for int16");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()).find("int16") != std::string::npos);
  }
}
