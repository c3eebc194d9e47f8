// What a scenario may ask of a host, checked before anything is allocated: element counts
// and byte sizes that overflow int64, tensors that the ranks of one host cannot hold, and
// numbers a dtype cannot represent (torch refuses those as well: torch.full(..., 1e30,
// dtype=torch.int32) raises instead of wrapping).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "distrun/core/tensor.hpp"

namespace distrun::scenario {

/// Parses "1M", "64K", "512" (K/M/G = powers of 1024) into bytes; nullopt when malformed.
std::optional<int64_t> parse_byte_size(const std::string& text);

/// The largest scenario file read (DISTRUN_SCENARIO_MAX_BYTES overrides it): checked before
/// the file is read, so a huge or endless file is refused at once.
constexpr int64_t kDefaultMaxScenarioBytes = 16 << 20;
int64_t max_scenario_bytes();

/// Physical memory of this host, in bytes (DISTRUN_HOST_MEMORY overrides it, for tests).
int64_t host_memory_bytes();

/// numel(shape) * dtype_size(dtype), or nullopt when it overflows int64.
std::optional<int64_t> checked_bytes(const Shape& shape, DType dtype);

/// "1.5 GiB": a byte count for messages.
std::string human_bytes(double bytes);

/// Why `v` cannot be stored in `dtype` (NaN or inf in an integer type, out of an integer
/// type's range, a finite number that overflows a floating type), or nullopt when it can.
std::optional<std::string> unrepresentable(double v, DType dtype);
/// The longest timeout a scenario or --timeout may set: a year, far below where its count of
/// milliseconds or a deadline on the steady clock would overflow.
constexpr double kMaxTimeoutSeconds = 365.0 * 24 * 3600;
/// Why `seconds` is no timeout (not more than 0, not finite, beyond kMaxTimeoutSeconds), or nullopt.
std::optional<std::string> bad_timeout(double seconds);

/// The same for an integer, compared exactly (INT64_MAX fits int64; 2^53 + 1 stays itself).
std::optional<std::string> unrepresentable(int64_t v, DType dtype);

}  // namespace distrun::scenario
