// Element types of tensors, with their names as the scenario format spells them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace distrun {

enum class DType : uint8_t { Float32, Float64, Float16, BFloat16, Int8, UInt8, Int32, Int64 };

/// Bytes per element of `t`.
size_t dtype_size(DType t);
/// The scenario-format name of `t` ("float32", "int64", ...).
const char* dtype_name(DType t);
/// Parses a dtype name; also accepts torch's short aliases (float, half, double, long, int).
std::optional<DType> parse_dtype(std::string_view name);
/// True for the integer types (bitwise reductions are only valid there).
bool is_integer(DType t);
/// The names of every dtype, comma separated, for error messages.
std::string dtype_names();

/// Calls `f(T{})` with T the C++ storage type of `t` (uint16_t for the 16-bit floats, which are
/// stored as raw bits; see half.hpp for their arithmetic).
template <typename F>
decltype(auto) dispatch_storage(DType t, F&& f) {
  switch (t) {
    case DType::Float32: return f(float{});
    case DType::Float64: return f(double{});
    case DType::Float16:
    case DType::BFloat16: return f(uint16_t{});
    case DType::Int8: return f(int8_t{});
    case DType::UInt8: return f(uint8_t{});
    case DType::Int32: return f(int32_t{});
    case DType::Int64: return f(int64_t{});
  }
  return f(float{});
}

}  // namespace distrun
