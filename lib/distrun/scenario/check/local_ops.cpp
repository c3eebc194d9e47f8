#include "distrun/scenario/check/local_ops.hpp"

#include <cmath>
#include <limits>
#include <sstream>

#include "distrun/scenario/model/limits.hpp"

namespace distrun::scenario {

namespace {
bool is_rank_or_index_var(const std::string& n) {
  return n == "rank" || n == "world_size" || n == "local_rank" || n == "local_world_size" || n == "i" || n == "j" ||
         n == "k" || n == "idx";
}

// Binds i, j, k and idx for flat index `flat` of `shape`.
struct IndexVars {
  int i, j, k, idx;
  explicit IndexVars(const Expression& e) : i(e.index("i")), j(e.index("j")), k(e.index("k")), idx(e.index("idx")) {}
  void set(Expression::Evaluator& b, const Shape& shape, int64_t flat) const {
    b.set(idx, double(flat));
    if (i < 0 && j < 0 && k < 0) return;
    int64_t rest = flat;
    int64_t coords[3] = {0, 0, 0};
    for (int d = int(shape.size()) - 1; d >= 0; --d) {
      const int64_t c = shape[size_t(d)] ? rest % shape[size_t(d)] : 0;
      rest = shape[size_t(d)] ? rest / shape[size_t(d)] : 0;
      if (d < 3) coords[d] = c;
    }
    b.set(i, double(coords[0]));
    b.set(j, double(coords[1]));
    b.set(k, double(coords[2]));
  }
};

// A literal into an element: integers exactly into integer dtypes, everything else through double.
void store(Tensor& t, int64_t flat, const Literal& v) {
  if (v.integer && is_integer(t.dtype()))
    set_int(t, flat, *v.integer);
  else
    t.set(flat, v.real);
}

std::string format_number(double v) {
  if (std::isnan(v)) return "nan";  // whatever its sign bit
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(int64_t(v));
  std::ostringstream ss;
  ss.precision(10);
  ss << v;
  return ss.str();
}
// Evaluates the fill expression of `spec` at every index of `shape`, hands each value to
// `put`, and refuses one the dtype cannot hold (torch refuses such a fill; so does the
// validation, before any worker). One scratch element tells whether a floating value overflows.
template <class Put>
void fill_values(const TensorSpec& spec, DType dtype, const Shape& shape, const RankEnv& env, const std::string& file,
                 Origin origin, Put put) {
  const Expression& ex = *spec.fill.expr;
  Expression::Evaluator b = ex.evaluator();
  b.set(bind_env(ex, env));
  const IndexVars idx(ex);
  const bool integer = is_integer(dtype);
  Tensor scratch = Tensor::empty({1}, dtype);
  const int64_t numel = numel_of(shape);
  for (int64_t e = 0; e < numel; ++e) {
    idx.set(b, shape, e);
    const double v = b.eval();
    bool bad;
    if (integer) {
      bad = unrepresentable(v, dtype).has_value();
    } else {
      scratch.set(0, v);
      bad = std::isinf(scratch.get(0)) && std::isfinite(v);
    }
    if (bad)
      throw error_at(file, origin.at(spec.fill.mark),
                     "fill '" + ex.text() + "' gives " + format_number(v) + " at index " + std::to_string(e) +
                         " on rank " + std::to_string(env.rank) + ": " +
                         unrepresentable(v, dtype).value_or("out of range"));
    put(e, v);
  }
}
}  // namespace

Bindings bind_env(const Expression& e, const RankEnv& env) {
  Bindings b = e.bindings();
  e.bind(b, "rank", env.rank);
  e.bind(b, "world_size", env.world_size);
  e.bind(b, "local_rank", env.local_rank);
  e.bind(b, "local_world_size", env.local_world_size);
  return b;
}

double eval_number(const Number& n, const RankEnv& env) {
  if (!n.expr) return n.value;
  return n.expr->eval(bind_env(*n.expr, env));
}

Shape spec_shape(const TensorSpec& spec, DType default_dtype, const RankEnv& env, const std::string& file,
                 Origin origin) {
  const DType dtype = spec.dtype.value_or(default_dtype);
  Shape shape;
  for (const auto& s : spec.shape) {
    const double v = eval_number(s, env);
    if (!(v >= 0) || v != std::floor(v) || v > 1e12)
      throw error_at(file, origin.at(s.mark),
                     "a shape entry must be a whole number of 0 or more, got " + format_number(v) + " on rank " +
                         std::to_string(env.rank));
    shape.push_back(int64_t(v));
  }
  if (spec.has_values && !spec.has_shape) shape = spec.values_shape;
  if (!checked_bytes(shape, dtype))
    throw error_at(file, origin.at(spec.mark),
                   "shape " + shape_str(shape) + " of " + dtype_name(dtype) +
                       " has more bytes than int64 can count (on rank " + std::to_string(env.rank) + ")");
  return shape;
}

Tensor make_tensor(const TensorSpec& spec, DType default_dtype, const RankEnv& env, const std::string& file,
                   Origin origin) {
  const DType dtype = spec.dtype.value_or(default_dtype);
  const Shape shape = spec_shape(spec, default_dtype, env, file, origin);
  if (spec.has_values) {
    Tensor t = Tensor::empty(shape, dtype);
    if (spec.values.size() == 1 && t.numel() != 1) {
      for (int64_t e = 0; e < t.numel(); ++e) store(t, e, spec.values[0]);  // a scalar fills the shape
    } else if (int64_t(spec.values.size()) != t.numel()) {
      throw error_at(file, origin.at(spec.mark),
                     "values has " + std::to_string(spec.values.size()) + " elements, shape " + shape_str(shape) +
                         " needs " + std::to_string(t.numel()));
    } else {
      for (int64_t e = 0; e < t.numel(); ++e) store(t, e, spec.values[size_t(e)]);
    }
    return t;
  }
  Tensor t = Tensor::empty(shape, dtype);
  if (!spec.fill.expr) {
    const Literal fill{spec.fill.value, spec.fill.integer};
    for (int64_t e = 0; e < t.numel(); ++e) store(t, e, fill);
    return t;
  }
  fill_values(spec, dtype, shape, env, file, origin, [&](int64_t e, double v) { t.set(e, v); });
  return t;
}

int64_t check_fill(const TensorSpec& spec, DType default_dtype, const RankEnv& env, const std::string& file,
                   Origin origin) {
  if (spec.has_values || !spec.fill.expr) return 0;  // literals were checked by the loader
  Shape shape = spec_shape(spec, default_dtype, env, file, origin);
  const Expression& e = *spec.fill.expr;
  // Without an index the fill is one value: evaluating it once checks every element.
  if (!e.uses("i") && !e.uses("j") && !e.uses("k") && !e.uses("idx") && numel_of(shape) > 0) shape = {1};
  int64_t n = 0;
  fill_values(spec, spec.dtype.value_or(default_dtype), shape, env, file, origin, [&](int64_t, double) { ++n; });
  return n;
}

std::vector<std::string> map_tensor_names(const Expression& e) {
  std::vector<std::string> out;
  for (const auto& v : e.variables())
    if (!is_rank_or_index_var(v)) out.push_back(v);
  return out;
}

Tensor apply_map(const Expression& e, const std::map<std::string, Tensor>& inputs, const Shape& shape, DType dtype,
                 const RankEnv& env, const std::string& file, Mark mark) {
  Expression::Evaluator values = e.evaluator();
  values.set(bind_env(e, env));
  const IndexVars idx(e);
  struct Bound {
    int index;
    const Tensor* t;
    bool broadcast;
  };
  std::vector<Bound> bound;
  for (const auto& [name, t] : inputs) bound.push_back({e.index(name), &t, t.numel() == 1});
  Tensor out = Tensor::empty(shape, dtype);
  for (int64_t el = 0; el < out.numel(); ++el) {
    idx.set(values, shape, el);
    for (const auto& b : bound) values.set(b.index, b.t->get(b.broadcast ? 0 : el));
    const double v = values.eval();
    if (is_integer(dtype))
      if (auto why = unrepresentable(v, dtype))  // a cast would give 0 or a wrapped number silently
        throw error_at(file, mark,
                       "map '" + excerpt(e.text()) + "' gives " + format_number(v) + " at element " +
                           std::to_string(el) + " on rank " + std::to_string(env.rank) + ": " + *why);
    out.set(el, v);
  }
  return out;
}

Shape local_reduce_shape(const Shape& in, std::optional<int> dim, bool keepdim) {
  if (!dim) return keepdim ? Shape(in.size(), 1) : Shape{};
  Shape out = in;
  if (keepdim)
    out[size_t(*dim)] = 1;
  else
    out.erase(out.begin() + *dim);
  return out;
}

Tensor local_reduce(const Tensor& in, ReduceOp op, std::optional<int> dim, bool keepdim) {
  // View the input as [outer, extent, inner] and reduce the middle axis.
  int64_t outer = 1, extent = in.numel(), inner = 1;
  if (dim) {
    extent = in.shape()[size_t(*dim)];
    for (int d = 0; d < *dim; ++d) outer *= in.shape()[size_t(d)];
    for (int d = *dim + 1; d < in.dim(); ++d) inner *= in.shape()[size_t(d)];
  }
  Tensor out = Tensor::empty(local_reduce_shape(in.shape(), dim, keepdim), in.dtype());
  const bool integer = is_integer(in.dtype());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t n = 0; n < inner; ++n) {
      const auto at = [&](int64_t x) { return (o * extent + x) * inner + n; };
      if (integer) {  // exact: in int64, wrapping as the dtype wraps (never through a double)
        int64_t acc = op == ReduceOp::Prod ? 1 : op == ReduceOp::Min ? INT64_MAX : op == ReduceOp::Max ? INT64_MIN : 0;
        for (int64_t x = 0; x < extent; ++x) {
          const int64_t v = get_int(in, at(x));
          switch (op) {
            case ReduceOp::Prod: acc = int64_t(uint64_t(acc) * uint64_t(v)); break;
            case ReduceOp::Min: acc = std::min(acc, v); break;
            case ReduceOp::Max: acc = std::max(acc, v); break;
            default: acc = int64_t(uint64_t(acc) + uint64_t(v)); break;
          }
        }
        set_int(out, o * inner + n, acc);
        if (op == ReduceOp::Avg && extent > 0) set_int(out, o * inner + n, get_int(out, o * inner + n) / extent);
        continue;
      }
      double acc = op == ReduceOp::Prod  ? 1.0
                   : op == ReduceOp::Min ? std::numeric_limits<double>::infinity()
                   : op == ReduceOp::Max ? -std::numeric_limits<double>::infinity()
                                         : 0.0;
      for (int64_t x = 0; x < extent; ++x) {
        const double v = in.get(at(x));
        switch (op) {
          case ReduceOp::Prod: acc *= v; break;
          case ReduceOp::Min:
            acc = std::isnan(v) || std::isnan(acc) ? v + acc : std::fmin(acc, v);
            break;  // NaN propagates
          case ReduceOp::Max: acc = std::isnan(v) || std::isnan(acc) ? v + acc : std::fmax(acc, v); break;
          default: acc += v; break;
        }
      }
      if (op == ReduceOp::Avg) acc /= double(extent);
      out.set(o * inner + n, acc);
    }
  return out;
}

namespace {
nlohmann::ordered_json substitute(const nlohmann::ordered_json& v, const ObjectTemplate& t, const RankEnv& env) {
  if (v.is_object()) {
    nlohmann::ordered_json o = nlohmann::ordered_json::object();
    for (auto it = v.begin(); it != v.end(); ++it) o[it.key()] = substitute(it.value(), t, env);
    return o;
  }
  if (v.is_array()) {
    nlohmann::ordered_json a = nlohmann::ordered_json::array();
    for (const auto& c : v) a.push_back(substitute(c, t, env));
    return a;
  }
  if (!v.is_string()) return v;
  const std::string s = v.get<std::string>();
  auto value_of = [&](const std::string& text) {
    for (auto& [src, e] : t.exprs)
      if (src == text) return e->eval(bind_env(*e, env));
    return 0.0;  // unreachable: the loader compiled every ${...}
  };
  if (s.size() > 3 && s.rfind("${", 0) == 0 && s.back() == '}' && s.find('}') == s.size() - 1) {
    const double x = value_of(s.substr(2, s.size() - 3));
    if (std::isfinite(x) && x == std::floor(x) && std::fabs(x) < 9e15) return int64_t(x);
    return x;
  }
  std::string out;
  size_t at = 0;
  for (size_t open = s.find("${"); open != std::string::npos; open = s.find("${", at)) {
    const size_t close = s.find('}', open);
    out += s.substr(at, open - at) + format_number(value_of(s.substr(open + 2, close - open - 2)));
    at = close + 1;
  }
  return out + s.substr(at);
}
}  // namespace

nlohmann::ordered_json substitute_object(const ObjectTemplate& t, const RankEnv& env) {
  return substitute(t.value, t, env);
}

int64_t get_int(const Tensor& t, int64_t flat) {
  return dispatch_storage(t.dtype(), [&](auto tag) -> int64_t {
    using T = decltype(tag);
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, uint16_t>)
      return int64_t(t.data_as<T>()[flat]);
    else
      return int64_t(t.get(flat));
  });
}

void set_int(Tensor& t, int64_t flat, int64_t value) {
  dispatch_storage(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, uint16_t>)
      t.data_as<T>()[flat] = T(value);
    else
      t.set(flat, double(value));
  });
}

}  // namespace distrun::scenario
