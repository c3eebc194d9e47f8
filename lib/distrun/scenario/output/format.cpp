#include "distrun/scenario/output/format.hpp"

#include <cmath>
#include <cstdio>
#include <functional>

#include "distrun/scenario/check/local_ops.hpp"

namespace distrun::scenario {

namespace {

constexpr int64_t kSummariseAbove = 1000;  // numpy's threshold
constexpr int64_t kEdgeItems = 3;

enum class Style { Integer, WholeFloat, Fixed, Scientific };

// numpy picks one style for the whole array from its finite values.
Style pick_style(const Tensor& t) {
  if (is_integer(t.dtype())) return Style::Integer;
  double max_abs = 0, min_abs = INFINITY;
  bool all_whole = true;
  for (int64_t e = 0; e < t.numel(); ++e) {
    const double v = t.get(e);
    if (!std::isfinite(v)) continue;
    const double a = std::fabs(v);
    max_abs = std::max(max_abs, a);
    if (a > 0) min_abs = std::min(min_abs, a);
    if (v != std::floor(v)) all_whole = false;
  }
  if (max_abs >= 1e8 || (min_abs < 1e-4 && min_abs > 0 && !all_whole)) return Style::Scientific;
  return all_whole ? Style::WholeFloat : Style::Fixed;
}

std::string element(const Tensor& t, int64_t e, Style style) {
  char buf[64];
  if (t.dtype() == DType::Bool) return t.get(e) != 0 ? "True" : "False";  // as torch prints it
  if (style == Style::Integer) {
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(t.get(e)));
    return buf;
  }
  const double v = t.get(e);
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  switch (style) {
    case Style::WholeFloat: std::snprintf(buf, sizeof buf, "%.0f.", v); break;
    case Style::Fixed: std::snprintf(buf, sizeof buf, "%.4f", v); break;
    default: std::snprintf(buf, sizeof buf, "%.4e", v); break;
  }
  if (style == Style::WholeFloat && v == 0 && std::signbit(v)) return "-0.";
  return buf;
}

// Indices shown along a dimension of `size`: all, or the first and last three.
std::vector<int64_t> shown(int64_t size, bool summarise) {
  std::vector<int64_t> out;
  if (!summarise || size <= 2 * kEdgeItems) {
    for (int64_t i = 0; i < size; ++i) out.push_back(i);
  } else {
    for (int64_t i = 0; i < kEdgeItems; ++i) out.push_back(i);
    out.push_back(-1);  // the "..." marker
    for (int64_t i = size - kEdgeItems; i < size; ++i) out.push_back(i);
  }
  return out;
}

}  // namespace

std::string format_values(const Tensor& t) {
  const Style style = pick_style(t);
  const bool summarise = t.numel() > kSummariseAbove;
  const Shape& shape = t.shape();
  if (shape.empty()) return element(t, 0, style);
  // Every element is padded to the widest shown one, as numpy does.
  size_t width = 1;
  for (int64_t e = 0; e < t.numel(); ++e) width = std::max(width, element(t, e, style).size());
  std::vector<int64_t> strides(shape.size(), 1);
  for (int d = int(shape.size()) - 2; d >= 0; --d) strides[size_t(d)] = strides[size_t(d) + 1] * shape[size_t(d) + 1];
  std::function<std::string(int, int64_t)> rec = [&](int d, int64_t base) {
    std::string out = "[";
    const auto idx = shown(shape[size_t(d)], summarise);
    const bool last_dim = d == int(shape.size()) - 1;
    for (size_t n = 0; n < idx.size(); ++n) {
      if (n > 0) {
        if (last_dim)
          out += " ";
        else
          out += std::string(shape.size() - size_t(d) - 1, '\n') + std::string(size_t(d) + 1, ' ');
      }
      if (idx[n] < 0) {
        out += "...";
        continue;
      }
      if (last_dim) {
        std::string s = element(t, base + idx[n], style);
        out += std::string(width - s.size(), ' ') + s;
      } else {
        out += rec(d + 1, base + idx[n] * strides[size_t(d)]);
      }
    }
    return out + "]";
  };
  return rec(0, 0);
}

nlohmann::ordered_json values_json(const Tensor& t) {
  auto value = [&](int64_t e) -> nlohmann::ordered_json {
    const double v = t.get(e);
    if (t.dtype() == DType::Bool) return v != 0;      // true/false, as json.dumps(t.tolist())
    if (is_integer(t.dtype())) return get_int(t, e);  // exact, even beyond 2^53
    // Whole floats print as integers (68, not 68.0), except -0.0, which would lose its sign.
    if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9e15 && !(v == 0 && std::signbit(v)))
      return int64_t(v);
    return v;
  };
  const Shape& shape = t.shape();
  if (shape.empty()) return value(0);
  std::function<nlohmann::ordered_json(size_t, int64_t)> rec = [&](size_t d, int64_t base) {
    nlohmann::ordered_json a = nlohmann::ordered_json::array();
    int64_t stride = 1;
    for (size_t q = d + 1; q < shape.size(); ++q) stride *= shape[q];
    for (int64_t i = 0; i < shape[d]; ++i)
      a.push_back(d + 1 == shape.size() ? value(base + i) : rec(d + 1, base + i * stride));
    return a;
  };
  return rec(0, 0);
}

std::string python_repr(const nlohmann::ordered_json& v) {
  if (v.is_null()) return "None";
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  if (v.is_string()) {
    std::string out = "'";
    for (char c : v.get<std::string>())
      out += (c == '\'' ? std::string("\\'") : c == '\\' ? std::string("\\\\") : std::string(1, c));
    return out + "'";
  }
  if (v.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + python_repr(v[i]);
    return out + "]";
  }
  if (v.is_object()) {
    std::string out = "{";
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      out += (first ? "" : ", ") + python_repr(it.key()) + ": " + python_repr(it.value());
      first = false;
    }
    return out + "}";
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isnan(d)) return "nan";  // as Python's repr of a float
    if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
    if (d == std::floor(d) && std::fabs(d) < 1e16) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.1f", d);
      return buf;
    }
  }
  return v.dump();
}

}  // namespace distrun::scenario
