#include "distrun/scenario/output/json_values.hpp"

#include <cmath>
#include <limits>

namespace distrun::scenario {

namespace {
// A prefix no scenario writes by accident: control characters cannot appear in a plain YAML
// scalar.
const std::string kTag =
    "\x01"
    "distrun-float:";

const char* nonfinite_name(double d) { return std::isnan(d) ? "NaN" : d > 0 ? "Infinity" : "-Infinity"; }

void dump_into(const nlohmann::ordered_json& v, std::string& out) {
  if (v.is_number_float() && !std::isfinite(v.get<double>())) {
    out += nonfinite_name(v.get<double>());
  } else if (v.is_array()) {
    out += '[';
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) out += ',';
      dump_into(v[i], out);
    }
    out += ']';
  } else if (v.is_object()) {
    out += '{';
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!first) out += ',';
      first = false;
      out += nlohmann::ordered_json(it.key()).dump();
      out += ':';
      dump_into(it.value(), out);
    }
    out += '}';
  } else {
    out += v.dump();
  }
}

template <class F>
nlohmann::ordered_json map_leaves(const nlohmann::ordered_json& v, const F& f) {
  if (v.is_array()) {
    nlohmann::ordered_json a = nlohmann::ordered_json::array();
    for (const auto& c : v) a.push_back(map_leaves(c, f));
    return a;
  }
  if (v.is_object()) {
    nlohmann::ordered_json o = nlohmann::ordered_json::object();
    for (auto it = v.begin(); it != v.end(); ++it) o[it.key()] = map_leaves(it.value(), f);
    return o;
  }
  return f(v);
}
}  // namespace

std::string dump_lossless(const nlohmann::ordered_json& v) {
  std::string out;
  dump_into(v, out);
  return out;
}

nlohmann::ordered_json encode_nonfinite(const nlohmann::ordered_json& v) {
  return map_leaves(v, [](const nlohmann::ordered_json& x) -> nlohmann::ordered_json {
    if (x.is_number_float() && !std::isfinite(x.get<double>())) return kTag + nonfinite_name(x.get<double>());
    return x;
  });
}

nlohmann::ordered_json decode_nonfinite(const nlohmann::ordered_json& v) {
  return map_leaves(v, [](const nlohmann::ordered_json& x) -> nlohmann::ordered_json {
    if (!x.is_string()) return x;
    const std::string& s = x.get_ref<const std::string&>();
    if (s.rfind(kTag, 0) != 0) return x;
    const std::string name = s.substr(kTag.size());
    if (name == "NaN") return std::numeric_limits<double>::quiet_NaN();
    return name == "Infinity" ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
  });
}

bool same_json(const nlohmann::ordered_json& a, const nlohmann::ordered_json& b) {
  if (a.is_number_float() && b.is_number_float()) {
    const double x = a.get<double>(), y = b.get<double>();
    return x == y || (std::isnan(x) && std::isnan(y));
  }
  if (a.is_array() && b.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (!same_json(a[i], b[i])) return false;
    return true;
  }
  if (a.is_object() && b.is_object()) {
    if (a.size() != b.size()) return false;
    auto ia = a.begin();
    for (auto ib = b.begin(); ib != b.end(); ++ia, ++ib)
      if (ia.key() != ib.key() || !same_json(ia.value(), ib.value())) return false;
    return true;
  }
  return a == b;
}

}  // namespace distrun::scenario
