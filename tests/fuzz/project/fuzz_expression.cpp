// libFuzzer target: the expression layer (muparser with the scenario's % and log) over
// arbitrary text. A parse either throws ExpressionError or yields an expression whose listed
// variables are all bindable and which evaluates (or throws ExpressionError) for any values.
// Anything else (a crash, a leak, another exception, a hang) is a bug.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>

#include "distrun/scenario/model/expression.hpp"

using distrun::scenario::Expression;
using distrun::scenario::ExpressionError;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 4096) return 0;  // scenario expressions are short; keep each run fast
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const Expression e(text);
    const auto& names = e.variables();
    for (size_t k = 0; k < names.size(); ++k)
      if (!e.uses(names[k]) || e.index(names[k]) != int(k)) std::abort();
    if (e.index("surely_not_a_variable_name_") >= 0 && !e.uses("surely_not_a_variable_name_")) std::abort();
    // Ordinary values, then the awkward ones the runner can meet (0 divisors, huge, NaN).
    const double values[] = {0.0, 1.0, 3.0, -2.5, 1e300, std::numeric_limits<double>::quiet_NaN()};
    for (double v : values) {
      distrun::scenario::Bindings b = e.bindings();
      for (const auto& n : names) e.bind(b, n, v);
      try {
        (void)e.eval(b);
      } catch (const ExpressionError&) {
      }
    }
  } catch (const ExpressionError& err) {
    if (err.message.empty()) std::abort();
  }
  return 0;
}
