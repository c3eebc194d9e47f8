#include "distrun/core/dtype.hpp"

namespace distrun {

namespace {

struct Info {
  DType type;
  const char* name;
  const char* alias;  // torch's other name, or null
  size_t size;
  bool integer;
  int64_t lo = 0, hi = 0;  // integer types only
};

const Info kInfo[] = {
    {DType::Float32, "float32", "float", 4, false},
    {DType::Float64, "float64", "double", 8, false},
    {DType::Float16, "float16", "half", 2, false},
    {DType::BFloat16, "bfloat16", nullptr, 2, false},
    {DType::Int8, "int8", nullptr, 1, true, INT8_MIN, INT8_MAX},
    {DType::UInt8, "uint8", nullptr, 1, true, 0, UINT8_MAX},
    {DType::Int16, "int16", "short", 2, true, INT16_MIN, INT16_MAX},
    {DType::Int32, "int32", "int", 4, true, INT32_MIN, INT32_MAX},
    {DType::Int64, "int64", "long", 8, true, INT64_MIN, INT64_MAX},
    {DType::Bool, "bool", nullptr, 1, true, 0, 1},
};

const Info& info(DType t) {
  for (const auto& i : kInfo)
    if (i.type == t) return i;
  return kInfo[0];
}

}  // namespace

size_t dtype_size(DType t) { return info(t).size; }

const char* dtype_name(DType t) { return info(t).name; }

std::optional<DType> parse_dtype(std::string_view n) {
  for (const auto& i : kInfo)
    if (n == i.name || (i.alias && n == i.alias)) return i.type;
  return std::nullopt;
}

bool is_integer(DType t) { return info(t).integer; }

std::pair<int64_t, int64_t> integer_range(DType t) { return {info(t).lo, info(t).hi}; }

std::vector<std::string> dtype_names() {
  std::vector<std::string> out;
  for (const auto& i : kInfo) out.emplace_back(i.name);
  return out;
}

}  // namespace distrun
