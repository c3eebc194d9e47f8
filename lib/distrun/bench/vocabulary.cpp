#include "distrun/bench/vocabulary.hpp"

#include <cmath>

#include "distrun/core/error.hpp"

namespace distrun::bench {

namespace {
struct TypeName {
  DType type;
  const char* name;
};
const TypeName kTypes[] = {{DType::Int8, "int8"},      {DType::UInt8, "uint8"},      {DType::Int32, "int32"},
                           {DType::Int64, "int64"},    {DType::Float16, "half"},     {DType::Float32, "float"},
                           {DType::Float64, "double"}, {DType::BFloat16, "bfloat16"}};
}  // namespace

const char* type_name(DType t) {
  for (const auto& n : kTypes)
    if (n.type == t) return n.name;
  return dtype_name(t);
}

std::optional<DType> parse_type(const std::string& name) {
  for (const auto& n : kTypes)
    if (name == n.name) return n.type;
  return parse_dtype(name);
}

std::vector<DType> all_types() {
  std::vector<DType> v;
  for (const auto& n : kTypes) v.push_back(n.type);
  return v;
}

std::vector<ReduceOp> all_reduce_ops() {
  return {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min, ReduceOp::Avg};
}

std::vector<int64_t> size_sweep(int64_t min, int64_t max, double factor, int64_t step) {
  if (min <= 0 || max < min)
    throw ConfigError("sizes: need 0 < -b (" + std::to_string(min) + ") <= -e (" + std::to_string(max) + ")");
  if (factor <= 1 && step <= 0 && max > min)
    throw ConfigError("sizes: -f must be above 1 or -i above 0 to go from -b to -e");
  std::vector<int64_t> sizes;
  for (int64_t s = min; s <= max;) {
    sizes.push_back(s);
    if (sizes.size() > 100000) throw ConfigError("sizes: more than 100000 sizes between -b and -e");
    const int64_t next = factor > 1 ? int64_t(std::llround(double(s) * factor)) : s + step;
    if (next <= s) {
      if (max == min) break;
      throw ConfigError("sizes: the step from " + std::to_string(s) + " does not advance");
    }
    s = next;
  }
  return sizes;
}

}  // namespace distrun::bench
