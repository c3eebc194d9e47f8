// How results look: tensors printed the way numpy prints arrays ("[[60. 60. 60.]]", integers
// without a dot, 4 decimals where needed, "..." past 1000 elements), objects the way Python
// prints them, and tensor values as nested JSON lists for the results file.
#pragma once
#include <nlohmann/json.hpp>

#include <string>

#include "distrun/core/tensor.hpp"

namespace distrun::scenario {

/// numpy-style text of a CPU tensor's values (no trailing newline).
std::string format_values(const Tensor& t);

/// The values of a CPU tensor as nested JSON lists (integral floats written as integers).
nlohmann::ordered_json values_json(const Tensor& t);

/// Python's repr of a JSON value: {'rank': 0, 'ok': True, 'x': None}.
std::string python_repr(const nlohmann::ordered_json& v);

}  // namespace distrun::scenario
