// Element types of tensors, with their names as the scenario format spells them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace distrun {

// Bool holds 0 or 1 only (stored as C++ bool); its reductions are logical, as torch's arithmetic on
// bool tensors: sum = or, prod = and, min = and, max = or. There is no uint64: torch 1.13 has none.
enum class DType : uint8_t { Float32, Float64, Float16, BFloat16, Int8, UInt8, Int16, Int32, Int64, Bool };

/// Bytes per element of `t`.
size_t dtype_size(DType t);
/// The scenario-format name of `t` ("float32", "int64", ...).
const char* dtype_name(DType t);
/// Parses a dtype name; also accepts torch's short aliases (float, half, double, short, long, int).
std::optional<DType> parse_dtype(std::string_view name);
/// True for the integer types and bool (bitwise reductions are only valid there).
bool is_integer(DType t);
/// The smallest and largest value of an integer dtype (bool: 0 and 1).
std::pair<int64_t, int64_t> integer_range(DType t);
/// The names of every dtype, for error messages.
std::vector<std::string> dtype_names();

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
    case DType::Int16: return f(int16_t{});
    case DType::Int32: return f(int32_t{});
    case DType::Int64: return f(int64_t{});
    case DType::Bool: return f(bool{});
  }
  return f(float{});
}

}  // namespace distrun
