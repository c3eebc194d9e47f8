#include "distrun/core/dtype.hpp"

namespace distrun {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::Float64:
    case DType::Int64: return 8;
    case DType::Float32:
    case DType::Int32: return 4;
    case DType::Float16:
    case DType::BFloat16: return 2;
    case DType::Int8:
    case DType::UInt8: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Float16: return "float16";
    case DType::BFloat16: return "bfloat16";
    case DType::Int8: return "int8";
    case DType::UInt8: return "uint8";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view n) {
  if (n == "float32" || n == "float") return DType::Float32;
  if (n == "float64" || n == "double") return DType::Float64;
  if (n == "float16" || n == "half") return DType::Float16;
  if (n == "bfloat16") return DType::BFloat16;
  if (n == "int8") return DType::Int8;
  if (n == "uint8") return DType::UInt8;
  if (n == "int32" || n == "int") return DType::Int32;
  if (n == "int64" || n == "long") return DType::Int64;
  return std::nullopt;
}

bool is_integer(DType t) { return t == DType::Int8 || t == DType::UInt8 || t == DType::Int32 || t == DType::Int64; }

std::string dtype_names() { return "float32, float64, float16, bfloat16, int8, uint8, int32, int64"; }

}  // namespace distrun
