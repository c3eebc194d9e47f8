#include "distrun/scenario/reference.hpp"

#include <cmath>
#include <limits>

#include "distrun/scenario/limits.hpp"

namespace distrun::scenario {

namespace {

// The input as the collectives see it: a scalar takes part as a one-element vector.
Tensor as_vector(const Tensor& t) { return t.dim() == 0 ? t.reshape({1}) : t; }

bool floating(DType t) { return !is_integer(t); }

// Integer reduction in the dtype's own modular arithmetic (as the backends' kernels do).
int64_t reduce_int(int64_t a, int64_t b, ReduceOp op) {
  const auto ua = uint64_t(a), ub = uint64_t(b);
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return int64_t(ua + ub);
    case ReduceOp::Prod: return int64_t(ua * ub);
    case ReduceOp::Min: return std::min(a, b);
    case ReduceOp::Max: return std::max(a, b);
    case ReduceOp::BAnd: return int64_t(ua & ub);
    case ReduceOp::BOr: return int64_t(ua | ub);
    case ReduceOp::BXor: return int64_t(ua ^ ub);
  }
  return a;
}

double reduce_real(double a, double b, ReduceOp op) {
  switch (op) {
    case ReduceOp::Prod: return a * b;
    case ReduceOp::Min: return std::fmin(a, b);
    case ReduceOp::Max: return std::fmax(a, b);
    default: return a + b;
  }
}

std::string ranks_str(int world) { return std::to_string(world) + (world == 1 ? " rank" : " ranks"); }

}  // namespace

double dtype_epsilon(DType t) {
  switch (t) {
    case DType::Float32: return std::ldexp(1.0, -23);
    case DType::Float64: return std::ldexp(1.0, -52);
    case DType::Float16: return std::ldexp(1.0, -10);
    case DType::BFloat16: return std::ldexp(1.0, -7);
    default: return 0;
  }
}

int64_t count_wrong(const Tensor& got, const RefTensor& want, int64_t* first) {
  const Tensor& w = want.value;
  if (first) *first = -1;
  if (!got.defined() || got.shape() != w.shape() || got.dtype() != w.dtype()) {
    if (first) *first = 0;
    return std::max<int64_t>(1, w.numel());
  }
  int64_t wrong = 0;
  const bool integer = is_integer(w.dtype());
  const double eps = dtype_epsilon(w.dtype());
  for (int64_t e = 0; e < w.numel(); ++e) {
    bool ok;
    if (integer) {
      ok = get_int(got, e) == get_int(w, e);
    } else {
      const double g = got.get(e), x = w.get(e);
      if (std::isnan(x) || std::isnan(g)) ok = std::isnan(x) && std::isnan(g);
      else if (std::isinf(x) || std::isinf(g)) ok = g == x;
      else ok = g == x || std::fabs(g - x) <= want.ulps * eps * std::max(std::fabs(x), want.scale);
    }
    if (!ok) {
      if (wrong == 0 && first) *first = e;
      ++wrong;
    }
  }
  return wrong;
}

Reference::Reference(Scenario& sc, int world_size, int local_world_size)
    : sc_(sc), world_size_(world_size), local_world_size_(std::max(1, local_world_size)) {
  if (sc.world_size && *sc.world_size != world_size)
    fail(sc.world_size_mark, "the scenario declares world_size " + std::to_string(*sc.world_size) +
                                 " but the launched world has " + ranks_str(world_size));
  for (const auto& g : sc.groups)
    for (int m : g.members)
      if (m >= world_size)
        fail(g.mark, "group '" + g.name + "': member " + std::to_string(m) + " is out of range for a world of " +
                         ranks_str(world_size));
  // Sizes first, from the shapes alone: a tensor no host could hold is refused before any
  // is allocated.
  for (int r = 0; r < world_size; ++r) {
    int64_t total = 0;
    for (const auto& [name, spec] : sc.tensors) {
      const auto bytes = checked_bytes(spec_shape(spec, sc.dtype, env(r), sc.file), spec.dtype.value_or(sc.dtype));
      if (__builtin_add_overflow(total, *bytes, &total)) total = INT64_MAX;
      check_fits(total, spec.mark, "the tensors of rank " + std::to_string(r) + " up to '" + name + "'");
    }
  }
  state_.resize(size_t(world_size));
  for (int r = 0; r < world_size; ++r)
    for (const auto& [name, spec] : sc.tensors) state_[size_t(r)][name] = RefTensor{make_tensor(spec, sc.dtype, env(r), sc.file)};
  results_.resize(sc.steps.size(), std::vector<Expected>(size_t(world_size)));
  for (auto& s : sc.steps) run_step(s);
}

RankEnv Reference::env(int rank) const {
  return {rank, world_size_, rank % local_world_size_, std::min(local_world_size_, world_size_)};
}

void Reference::fail(Mark m, const std::string& msg) const { throw error_at(sc_.file, m, msg); }

void Reference::check_fits(int64_t bytes_per_rank, Mark m, const std::string& what) const {
  const int64_t ranks_here = std::min(local_world_size_, world_size_);
  const int64_t memory = host_memory_bytes();
  int64_t on_host = 0;
  if (!__builtin_mul_overflow(bytes_per_rank, ranks_here, &on_host) && on_host <= memory) return;
  fail(m, what + " need" + (what.rfind("the ", 0) == 0 ? "" : "s") + " " + human_bytes(double(bytes_per_rank)) +
              " per rank; " + std::to_string(ranks_here) + (ranks_here == 1 ? " rank" : " ranks") + " on this host need " +
              human_bytes(double(bytes_per_rank) * double(ranks_here)) + ", more than its " +
              human_bytes(double(memory)) + " of memory");
}

std::string Reference::where(const Step& s) const {
  return "step " + std::to_string(s.index) + " (" + op_name(s.op) + ")";
}

std::vector<int> Reference::participants(const Step& s) const {
  if (s.group) return sc_.find_group(*s.group)->members;
  std::vector<int> all(static_cast<size_t>(world_size_));
  for (int r = 0; r < world_size_; ++r) all[size_t(r)] = r;
  return all;
}

int Reference::member_index(const Step& s, const std::vector<int>& members, int global, Mark m,
                            const char* what) const {
  if (global >= world_size_)
    fail(m, where(s) + ": " + what + " " + std::to_string(global) + " is out of range for a world of " +
                ranks_str(world_size_));
  for (size_t i = 0; i < members.size(); ++i)
    if (members[i] == global) return int(i);
  fail(m, where(s) + ": " + what + " " + std::to_string(global) + " is not a member of group '" + *s.group + "'");
}

RefTensor Reference::input(Step& s, int rank) {
  if (s.input.spec) {
    const TensorSpec& spec = *s.input.spec;
    check_fits(*checked_bytes(spec_shape(spec, sc_.dtype, env(rank), sc_.file), spec.dtype.value_or(sc_.dtype)), spec.mark,
               where(s) + ": the input");
    return RefTensor{make_tensor(spec, sc_.dtype, env(rank), sc_.file)};
  }
  const State& st = state_[size_t(rank)];
  auto it = st.find(s.input.name);
  if (it == st.end()) {
    std::vector<std::string> names;
    for (const auto& kv : st) names.push_back(kv.first);
    fail(s.input.mark, where(s) + ": tensor '" + s.input.name + "' is not defined on rank " + std::to_string(rank) +
                           did_you_mean(s.input.name, names));
  }
  return it->second;
}

void Reference::check_reduce(const Step& s, DType dtype) const {
  if (!reduce_op_valid_for(s.reduce, dtype))
    fail(s.reduce_mark, where(s) + ": reduce op '" + reduce_op_name(s.reduce) + "' needs an integer dtype, the tensor is " +
                            dtype_name(dtype));
}

int Reference::check_dim(const Step& s, const Tensor& t) const {
  const int ndim = std::max(1, t.dim());
  if (s.dim >= ndim)
    fail(s.dim_mark, where(s) + ": dim " + std::to_string(s.dim) + " is out of range for shape " + shape_str(t.shape()));
  return s.dim;
}

void Reference::require_same_shapes(const Step& s, const std::vector<RefTensor>& in, const std::vector<int>& members,
                                    int except_dim) const {
  for (size_t i = 1; i < in.size(); ++i) {
    Shape a = as_vector(in[0].value).shape(), b = as_vector(in[i].value).shape();
    if (except_dim >= 0 && a.size() == b.size() && size_t(except_dim) < a.size()) a[size_t(except_dim)] = b[size_t(except_dim)];
    if (a != b || in[0].value.dtype() != in[i].value.dtype())
      fail(s.input.mark, where(s) + ": rank " + std::to_string(members[i]) + " has " + dtype_name(in[i].value.dtype()) +
                             " " + shape_str(in[i].value.shape()) + " but rank " + std::to_string(members[0]) + " has " +
                             dtype_name(in[0].value.dtype()) + " " + shape_str(in[0].value.shape()));
  }
}

RefTensor Reference::reduce_over(const std::vector<RefTensor>& in, ReduceOp op) const {
  const Tensor& first = in[0].value;
  const int64_t n = int64_t(in.size());
  RefTensor out{Tensor::empty(first.shape(), first.dtype())};
  for (const auto& t : in) {
    out.ulps = std::max(out.ulps, t.ulps);
    out.scale = std::max(out.scale, t.scale);
  }
  if (is_integer(first.dtype())) {
    for (int64_t e = 0; e < first.numel(); ++e) {
      int64_t acc = get_int(in[0].value, e);
      for (size_t r = 1; r < in.size(); ++r) acc = reduce_int(acc, get_int(in[r].value, e), op);
      set_int(out.value, e, acc);
      if (op == ReduceOp::Avg) set_int(out.value, e, get_int(out.value, e) / n);  // truncates toward zero
    }
    return out;
  }
  double magnitude = 0;
  for (int64_t e = 0; e < first.numel(); ++e) {
    double acc = in[0].value.get(e), abs_sum = std::fabs(acc);
    for (size_t r = 1; r < in.size(); ++r) {
      const double v = in[r].value.get(e);
      acc = reduce_real(acc, v, op);
      abs_sum += std::fabs(v);
    }
    if (op == ReduceOp::Avg) {
      acc /= double(n);
      abs_sum /= double(n);
    }
    magnitude = std::max(magnitude, op == ReduceOp::Prod ? std::fabs(acc) : abs_sum);
    out.value.set(e, acc);
  }
  // Backends add in their own order, rounding to the dtype at each step: allow a couple of
  // ulps per rank, relative to the sum of magnitudes (cancellation).
  if (op == ReduceOp::Sum || op == ReduceOp::Avg || op == ReduceOp::Prod) {
    out.ulps += 2.0 * double(n) + 2;
    out.scale = std::max(out.scale, magnitude);
  }
  return out;
}

void Reference::set_result(const Step& s, int rank, const RefTensor& t) {
  state_[size_t(rank)][s.output] = t;
  Expected& e = results_[size_t(s.index)][size_t(rank)];
  e.has_result = true;
  e.name = s.output;
  e.tensor = t;
}

void Reference::set_object(const Step& s, int rank, nlohmann::ordered_json obj) {
  Expected& e = results_[size_t(s.index)][size_t(rank)];
  e.has_result = true;
  e.object = std::move(obj);
}

void Reference::run_step(Step& s) {
  const std::vector<int> members = participants(s);
  const int n = int(members.size());
  auto inputs = [&] {
    std::vector<RefTensor> in;
    for (int r : members) in.push_back(input(s, r));
    return in;
  };
  switch (s.op) {
    case Op::Broadcast: {
      member_index(s, members, s.src, s.src_mark, "src");
      RefTensor src = input(s, s.src);
      for (int r : members) set_result(s, r, src);
      break;
    }
    case Op::Scatter: {
      member_index(s, members, s.src, s.src_mark, "src");
      RefTensor src = input(s, s.src);
      Tensor v = as_vector(src.value);
      const int dim = check_dim(s, v);
      if (v.shape()[size_t(dim)] % n != 0)
        fail(s.input.mark, where(s) + ": size " + std::to_string(v.shape()[size_t(dim)]) + " of dim " + std::to_string(dim) +
                               " of " + shape_str(src.value.shape()) + " does not split into " + std::to_string(n) + " equal chunks");
      for (int g = 0; g < n; ++g) set_result(s, members[size_t(g)], RefTensor{v.chunk(dim, g, n).clone(), src.ulps, src.scale});
      break;
    }
    case Op::Gather:
    case Op::AllGather: {
      if (s.op == Op::Gather) member_index(s, members, s.dst, s.dst_mark, "dst");
      auto in = inputs();
      const int dim = check_dim(s, as_vector(in[0].value));
      require_same_shapes(s, in, members, -1);
      std::vector<Tensor> parts;
      RefTensor out;
      int64_t out_bytes = 0;
      for (auto& t : in)
        if (__builtin_add_overflow(out_bytes, int64_t(t.value.nbytes()), &out_bytes)) out_bytes = INT64_MAX;
      check_fits(out_bytes, s.mark, where(s) + ": the result");
      for (auto& t : in) {
        parts.push_back(as_vector(t.value));
        out.ulps = std::max(out.ulps, t.ulps);
        out.scale = std::max(out.scale, t.scale);
      }
      out.value = Tensor::cat(parts, dim);
      if (s.op == Op::Gather) set_result(s, s.dst, out);
      else
        for (int r : members) set_result(s, r, out);
      break;
    }
    case Op::Reduce:
    case Op::AllReduce:
    case Op::ReduceScatter: {
      if (s.op == Op::Reduce) member_index(s, members, s.dst, s.dst_mark, "dst");
      auto in = inputs();
      require_same_shapes(s, in, members, -1);
      check_reduce(s, in[0].value.dtype());
      RefTensor red = reduce_over(in, s.reduce);
      if (s.op == Op::Reduce) {
        set_result(s, s.dst, red);
      } else if (s.op == Op::AllReduce) {
        for (int r : members) set_result(s, r, red);
      } else {
        Tensor v = as_vector(red.value);
        const int dim = check_dim(s, v);
        if (v.shape()[size_t(dim)] % n != 0)
          fail(s.input.mark, where(s) + ": size " + std::to_string(v.shape()[size_t(dim)]) + " of dim " +
                                 std::to_string(dim) + " of " + shape_str(red.value.shape()) + " does not split into " +
                                 std::to_string(n) + " equal chunks");
        for (int g = 0; g < n; ++g) set_result(s, members[size_t(g)], RefTensor{v.chunk(dim, g, n).clone(), red.ulps, red.scale});
      }
      break;
    }
    case Op::AllToAll: {
      auto in = inputs();
      const int dim = check_dim(s, as_vector(in[0].value));
      require_same_shapes(s, in, members, dim);
      // splits[r][j]: how much of rank r's input (along dim) goes to group rank j.
      std::vector<std::vector<int64_t>> splits(static_cast<size_t>(n));
      for (int r = 0; r < n; ++r) {
        const int64_t extent = as_vector(in[size_t(r)].value).shape()[size_t(dim)];
        if (!s.has_split_sizes) {
          if (extent % n != 0)
            fail(s.input.mark, where(s) + ": size " + std::to_string(extent) + " of dim " + std::to_string(dim) + " on rank " +
                                   std::to_string(members[size_t(r)]) + " does not split into " + std::to_string(n) +
                                   " equal chunks (give split_sizes for uneven splits)");
          splits[size_t(r)].assign(size_t(n), extent / n);
          continue;
        }
        if (int(s.split_sizes.size()) != n)
          fail(s.split_mark, where(s) + ": split_sizes has " + std::to_string(s.split_sizes.size()) + " entries for " +
                                 std::to_string(n) + " ranks");
        int64_t total = 0;
        for (const auto& num : s.split_sizes) {
          const double v = eval_number(num, env(members[size_t(r)]));
          if (!(v >= 0) || v != std::floor(v))
            fail(num.mark, where(s) + ": a split size must be a whole number of 0 or more, got " + std::to_string(v) +
                               " on rank " + std::to_string(members[size_t(r)]));
          splits[size_t(r)].push_back(int64_t(v));
          total += int64_t(v);
        }
        if (total != extent)
          fail(s.split_mark, where(s) + ": split_sizes add up to " + std::to_string(total) + " on rank " +
                                 std::to_string(members[size_t(r)]) + " but dim " + std::to_string(dim) + " has " +
                                 std::to_string(extent));
      }
      for (int j = 0; j < n; ++j) {
        std::vector<Tensor> parts;
        RefTensor out;
        for (int r = 0; r < n; ++r) {
          int64_t start = 0;
          for (int q = 0; q < j; ++q) start += splits[size_t(r)][size_t(q)];
          parts.push_back(as_vector(in[size_t(r)].value).slice(dim, start, splits[size_t(r)][size_t(j)]).clone());
          out.ulps = std::max(out.ulps, in[size_t(r)].ulps);
          out.scale = std::max(out.scale, in[size_t(r)].scale);
        }
        out.value = Tensor::cat(parts, dim);
        set_result(s, members[size_t(j)], out);
      }
      break;
    }
    case Op::SendRecv: {
      member_index(s, members, s.src, s.src_mark, "src");
      member_index(s, members, s.dst, s.dst_mark, "dst");
      set_result(s, s.dst, input(s, s.src));
      break;
    }
    case Op::Barrier: break;
    case Op::Map: {
      std::vector<int> ranks = members;
      if (s.ranks) {
        ranks.clear();
        for (int r : *s.ranks) {
          if (r < 0 || r >= world_size_)
            fail(s.ranks_mark, where(s) + ": rank " + std::to_string(r) + " in ranks is out of range for a world of " +
                                   ranks_str(world_size_));
          if (std::find(members.begin(), members.end(), r) != members.end()) ranks.push_back(r);
        }
      }
      for (int r : ranks) run_map(s, r);
      break;
    }
    case Op::LocalReduce: {
      for (int r : members) {
        RefTensor in = input(s, r);
        if (s.local_dim && *s.local_dim >= in.value.dim())
          fail(s.dim_mark, where(s) + ": dim " + std::to_string(*s.local_dim) + " is out of range for shape " +
                               shape_str(in.value.shape()));
        RefTensor out{local_reduce(in.value, s.reduce, s.local_dim, s.keepdim), in.ulps, in.scale};
        if (floating(in.value.dtype()) && s.reduce != ReduceOp::Min && s.reduce != ReduceOp::Max) {
          const int64_t count = s.local_dim ? in.value.shape()[size_t(*s.local_dim)] : in.value.numel();
          double mag = 0;
          for (int64_t e = 0; e < in.value.numel(); ++e) mag += std::fabs(in.value.get(e));
          out.ulps += 2.0 * double(count) + 2;
          out.scale = std::max(out.scale, s.reduce == ReduceOp::Prod ? 0.0 : mag);
        }
        set_result(s, r, out);
      }
      break;
    }
    case Op::AllGatherObject:
    case Op::GatherObject: {
      if (s.op == Op::GatherObject) member_index(s, members, s.dst, s.dst_mark, "dst");
      nlohmann::ordered_json list = nlohmann::ordered_json::array();
      for (int r : members) list.push_back(substitute_object(s.object, env(r)));
      if (s.op == Op::GatherObject) set_object(s, s.dst, list);
      else
        for (int r : members) set_object(s, r, list);
      break;
    }
    case Op::BroadcastObject: {
      member_index(s, members, s.src, s.src_mark, "src");
      const nlohmann::ordered_json obj = substitute_object(s.object, env(s.src));
      for (int r : members) set_object(s, r, obj);
      break;
    }
    case Op::Bench: check_bench(s); break;
  }
}

void Reference::run_map(Step& s, int rank) {
  const State& st = state_[size_t(rank)];
  std::map<std::string, Tensor> inputs;
  std::optional<Shape> shape;
  std::optional<DType> first_dtype;
  double ulps = 0, scale = 0;
  for (const auto& name : map_tensor_names(*s.expr)) {
    auto it = st.find(name);
    if (it == st.end()) {
      std::vector<std::string> names = {"rank", "world_size", "local_rank", "local_world_size", "i", "j", "k", "idx"};
      for (const auto& kv : st) names.push_back(kv.first);
      fail(s.expr_mark, where(s) + ": '" + name + "' in expr is not a tensor defined on rank " + std::to_string(rank) +
                            " nor a known name" + did_you_mean(name, names));
    }
    const Tensor& t = it->second.value;
    inputs[name] = t;
    ulps = std::max(ulps, it->second.ulps);
    scale = std::max(scale, it->second.scale);
    if (!first_dtype) first_dtype = t.dtype();
    if (t.numel() != 1) {
      if (shape && *shape != t.shape())
        fail(s.expr_mark, where(s) + ": tensors in expr have different shapes on rank " + std::to_string(rank) + ": " +
                              shape_str(*shape) + " and " + shape_str(t.shape()) + " ('" + name + "')");
      shape = t.shape();
    }
  }
  auto out_it = st.find(s.output);
  if (!shape) {
    if (!inputs.empty()) shape = inputs.begin()->second.shape();
    else if (out_it != st.end()) shape = out_it->second.value.shape();
    else
      fail(s.expr_mark, where(s) + ": expr names no tensor and output '" + s.output + "' does not exist on rank " +
                            std::to_string(rank) + ", so its shape is unknown");
  }
  DType dtype = s.dtype ? *s.dtype : first_dtype ? *first_dtype : out_it != st.end() ? out_it->second.value.dtype() : sc_.dtype;
  RefTensor out{apply_map(*s.expr, inputs, *shape, dtype, env(rank))};
  if (floating(dtype) && ulps > 0) {
    // Inexact inputs: allow their error to grow through the expression (exp, log, division).
    for (const auto& kv : inputs)
      for (int64_t e = 0; e < kv.second.numel(); ++e) scale = std::max(scale, std::fabs(kv.second.get(e)));
    for (int64_t e = 0; e < out.value.numel(); ++e) scale = std::max(scale, std::fabs(out.value.get(e)));
    out.ulps = 4 * ulps + 8;
    out.scale = std::max(scale, propagated_error(s, inputs, *shape, rank) / (out.ulps * dtype_epsilon(dtype)));
  }
  set_result(s, rank, out);
}

double Reference::propagated_error(Step& s, const std::map<std::string, Tensor>& inputs, const Shape& shape, int rank) {
  // How far the map's result can move when each input moves within its own tolerance: the
  // map evaluated (in float64) with one input shifted up and down by twice its allowed
  // error, the others held. This follows steep functions (exp(s) amplifies an ulp of s by s)
  // where a fixed number of ulps would not.
  const State& st = state_[size_t(rank)];
  const Tensor base = apply_map(*s.expr, inputs, shape, DType::Float64, env(rank));
  std::vector<double> err(size_t(base.numel()), 0.0);
  for (const auto& [name, t] : inputs) {
    const RefTensor& ref = st.at(name);
    if (ref.ulps == 0 || is_integer(t.dtype())) continue;
    const double eps = dtype_epsilon(t.dtype());
    for (const double sign : {1.0, -1.0}) {
      Tensor moved = Tensor::empty(t.shape(), DType::Float64);
      for (int64_t e = 0; e < t.numel(); ++e) {
        const double x = t.get(e);
        moved.set(e, x + sign * 2 * ref.ulps * eps * std::max(std::fabs(x), ref.scale));
      }
      auto shifted = inputs;
      shifted[name] = moved;
      const Tensor y = apply_map(*s.expr, shifted, shape, DType::Float64, env(rank));
      for (int64_t e = 0; e < y.numel(); ++e) {
        const double d = std::fabs(y.get(e) - base.get(e));
        if (std::isfinite(d)) err[size_t(e)] += d / 2;  // the two directions, averaged
      }
    }
  }
  double worst = 0;
  for (double e : err) worst = std::max(worst, e);
  return worst;
}

void Reference::check_bench(const Step& s) const {
  const auto members = participants(s);
  const auto& b = s.bench;
  const DType dtype = b.dtype.value_or(sc_.dtype);
  if (!reduce_op_valid_for(b.reduce, dtype))
    fail(s.mark, where(s) + ": reduce op '" + reduce_op_name(b.reduce) + "' needs an integer dtype, bench uses " +
                     dtype_name(dtype));
  if (b.root < 0 || b.root >= world_size_)
    fail(s.mark, where(s) + ": root " + std::to_string(b.root) + " is out of range for a world of " + ranks_str(world_size_));
  if (std::find(members.begin(), members.end(), b.root) == members.end())
    fail(s.mark, where(s) + ": root " + std::to_string(b.root) + " is not a member of group '" + *s.group + "'");
  // A bench rank holds an input, an output and the expected values of its largest size.
  for (size_t k = 0; k < b.bytes.size(); ++k) {
    int64_t need = 0;
    if (__builtin_mul_overflow(b.bytes[k], int64_t(3), &need)) need = INT64_MAX;
    check_fits(need, s.mark, where(s) + ": size " + human_bytes(double(b.bytes[k])) + " (input, output and expected values)");
  }
  if (b.collective == Op::SendRecv && members.size() < 2)
    fail(s.mark, where(s) + ": send_recv needs at least 2 ranks");
}

}  // namespace distrun::scenario
