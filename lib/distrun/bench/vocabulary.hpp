// nccl-tests' words: its dtype and reduce-op names, and its size sweep (-b -e -f -i).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "distrun/backend/types.hpp"

namespace distrun::bench {

/// nccl-tests' name of `t`: float, half, bfloat16, double, int8, uint8, int32, int64.
const char* type_name(DType t);
/// Parses a nccl-tests type name (distrun's names, e.g. float32, are accepted too).
std::optional<DType> parse_type(const std::string& name);
/// Every dtype in the order `-d all` runs them.
std::vector<DType> all_types();
/// The reduce ops `-o all` runs (nccl-tests': sum, prod, max, min, avg).
std::vector<ReduceOp> all_reduce_ops();

/// nccl-tests' sweep: from min to max (inclusive), multiplying by `factor` when it is above
/// 1, else adding `step` bytes. ConfigError when the range is empty or would not advance.
std::vector<int64_t> size_sweep(int64_t min, int64_t max, double factor, int64_t step);

}  // namespace distrun::bench
