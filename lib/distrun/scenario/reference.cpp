#include "distrun/scenario/reference.hpp"

#include <cmath>
#include <limits>

#include "distrun/scenario/limits.hpp"
#include "distrun/scenario/op_table.hpp"

namespace distrun::scenario {

namespace {


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

}  // namespace

Tensor as_vector(const Tensor& t) { return t.dim() == 0 ? t.reshape({1}) : t; }

std::string ranks_str(int world) { return std::to_string(world) + (world == 1 ? " rank" : " ranks"); }

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
    for (const auto& [name, spec] : sc.tensors) {
      make_tensor(spec, sc.dtype, env(r), sc.file);  // every fill value checked against its dtype, then dropped
      RefTensor lazy;
      lazy.spec = &spec;
      state_[size_t(r)][name] = lazy;
    }
  results_.resize(sc.steps.size(), std::vector<Expected>(size_t(world_size)));
  for (auto& s : sc.steps) op_spec(s.op).simulate(*this, s);
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
  return *tensor(rank, s.input.name);
}

std::optional<RefTensor> Reference::tensor(int rank, const std::string& name) const {
  const State& st = state_[size_t(rank)];
  auto it = st.find(name);
  if (it == st.end()) return std::nullopt;
  if (!it->second.spec) return it->second;
  return RefTensor{make_tensor(*it->second.spec, sc_.dtype, env(rank), sc_.file)};
}

RefTensor Reference::reduce_members(Step& s, const std::vector<int>& members) {
  // Streaming: one member's input at a time, summed in double (or the dtype's integers) in
  // member order, exactly as reduce_over() over all of them.
  const RefTensor first = input(s, members[0]);
  check_reduce(s, first.value.dtype());
  const ReduceOp op = s.reduce;
  const int64_t numel = first.value.numel();
  const int64_t n = int64_t(members.size());
  RefTensor out{Tensor::empty(first.value.shape(), first.value.dtype())};
  out.ulps = first.ulps;
  out.scale = first.scale;
  const bool integer = is_integer(first.value.dtype());
  std::vector<int64_t> iacc;
  std::vector<double> acc, abs_sum;
  if (integer) {
    iacc.resize(size_t(numel));
    for (int64_t e = 0; e < numel; ++e) iacc[size_t(e)] = get_int(first.value, e);
  } else {
    acc.resize(size_t(numel));
    abs_sum.resize(size_t(numel));
    for (int64_t e = 0; e < numel; ++e) {
      acc[size_t(e)] = first.value.get(e);
      abs_sum[size_t(e)] = std::fabs(acc[size_t(e)]);
    }
  }
  for (size_t k = 1; k < members.size(); ++k) {
    const RefTensor t = input(s, members[k]);
    require_same_shapes(s, {first, t}, {members[0], members[k]}, -1);
    out.ulps = std::max(out.ulps, t.ulps);
    out.scale = std::max(out.scale, t.scale);
    if (integer) {
      for (int64_t e = 0; e < numel; ++e) iacc[size_t(e)] = reduce_int(iacc[size_t(e)], get_int(t.value, e), op);
    } else {
      for (int64_t e = 0; e < numel; ++e) {
        const double v = t.value.get(e);
        acc[size_t(e)] = reduce_real(acc[size_t(e)], v, op);
        abs_sum[size_t(e)] += std::fabs(v);
      }
    }
  }
  if (integer) {
    for (int64_t e = 0; e < numel; ++e) set_int(out.value, e, op == ReduceOp::Avg ? iacc[size_t(e)] / n : iacc[size_t(e)]);
    return out;
  }
  double magnitude = 0;
  for (int64_t e = 0; e < numel; ++e) {
    double a = acc[size_t(e)], m = abs_sum[size_t(e)];
    if (op == ReduceOp::Avg) {
      a /= double(n);
      m /= double(n);
    }
    magnitude = std::max(magnitude, op == ReduceOp::Prod ? std::fabs(a) : m);
    out.value.set(e, a);
  }
  if (op == ReduceOp::Sum || op == ReduceOp::Avg || op == ReduceOp::Prod) {
    out.ulps += 2.0 * double(n) + 2;
    out.scale = std::max(out.scale, magnitude);
  }
  return out;
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

}  // namespace distrun::scenario
