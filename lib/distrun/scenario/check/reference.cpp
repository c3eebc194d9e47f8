#include "distrun/scenario/check/reference.hpp"

#include <cmath>
#include <limits>
#include <set>

#include "distrun/scenario/model/limits.hpp"
#include "distrun/scenario/model/op_table.hpp"

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
    case ReduceOp::Min: return std::isnan(a) || std::isnan(b) ? std::nan("") : std::fmin(a, b);  // NaN propagates
    case ReduceOp::Max: return std::isnan(a) || std::isnan(b) ? std::nan("") : std::fmax(a, b);
    default: return a + b;
  }
}

}  // namespace

Tensor as_vector(const Tensor& t) { return t.dim() == 0 ? t.reshape({1}) : t; }

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
      if (std::isnan(x) || std::isnan(g))
        ok = std::isnan(x) && std::isnan(g);
      else if (std::isinf(x) || std::isinf(g))
        ok = g == x;
      else
        ok = g == x || std::fabs(g - x) <= want.ulps * eps * std::max(std::fabs(x), want.scale);
    }
    if (!ok) {
      if (wrong == 0 && first) *first = e;
      ++wrong;
    }
  }
  return wrong;
}

Reference::Reference(const Scenario& sc, int world_size, int local_world_size, std::optional<int> own_rank)
    : WorldView(sc, world_size, local_world_size) {
  // Every check (they throw); from here on, values only.
  [[maybe_unused]] const Validation checked(sc, world_size, local_world_size, own_rank);
  state_.resize(size_t(world_size));
  for (int r = 0; r < world_size; ++r)
    for (const auto& [name, spec] : sc.tensors) {
      RefTensor lazy;
      lazy.spec = &spec;
      state_[size_t(r)][name] = lazy;
    }
  plan(own_rank);
  results_.resize(sc.steps.size(), std::vector<Expected>(size_t(world_size)));
  for (auto& s : sc.steps) {
    const auto& want = wanted_[size_t(s.index)];
    if (std::find(want.begin(), want.end(), 1) != want.end()) sc.spec(s.op).simulate(*this, s);
    // After the step read its inputs (its output may be one of them): a result nobody reads
    // replaces the rank's old value by an unknown one.
    for (int r : dropped_[size_t(s.index)]) {
      RefTensor unknown;
      unknown.unknown = true;
      state_[size_t(r)][s.output.str()] = unknown;
    }
  }
}

void Reference::plan(std::optional<int> own) {
  const size_t steps = sc_.steps.size();
  wanted_.assign(steps, std::vector<char>(size_t(world_size_), own ? 0 : 1));
  dropped_.assign(steps, {});
  if (!own) return;
  // live[r]: the tensors of rank r whose values, before the step being looked at, some
  // wanted result reads.
  std::vector<std::set<std::string>> live(static_cast<size_t>(world_size_));
  for (size_t k = steps; k-- > 0;) {
    const Step& s = sc_.steps[k];
    const OpSpec& spec = sc_.spec(s.op);
    std::vector<int> want;
    for (int r : result_ranks(s)) {
      auto& mine = live[size_t(r)];
      if (r == *own || (!spec.object_result && mine.count(s.output.str()))) {
        wanted_[k][size_t(r)] = 1;
        want.push_back(r);
      } else if (!spec.object_result) {
        dropped_[k].push_back(r);
      }
      if (!spec.object_result) mine.erase(s.output.str());
    }
    if (want.empty()) continue;
    auto reads = [&](int r, const std::string& name) {
      if (!name.empty()) live[size_t(r)].insert(name);  // empty: an inline input, made from its spec
    };
    switch (spec.reads) {
      case Reads::Nothing: break;
      case Reads::Src: reads(s.args().src, s.input.str()); break;
      case Reads::EveryMember:
        for (int r : participants(s)) reads(r, s.input.str());
        break;
      case Reads::Own:
        for (int r : want) {
          if (s.args().more().expr) {  // map: the tensors its expression names, and the output it replaces
            for (const auto& name : map_tensor_names(*s.args().more().expr)) reads(r, name);
            reads(r, s.output.str());
          } else {
            reads(r, s.input.str());
          }
        }
        break;
    }
  }
}

RefTensor Reference::input(const Step& s, int rank) {
  if (s.args().input.spec)
    return RefTensor{make_tensor(*s.args().input.spec, sc_.dtype, env(rank), sc_.file, s.origin())};
  return *tensor(rank, s.input.str());
}

std::optional<RefTensor> Reference::tensor(int rank, const std::string& name) const {
  const State& st = state_[size_t(rank)];
  auto it = st.find(name);
  if (it == st.end()) return std::nullopt;
  if (it->second.unknown)
    throw Error("internal: the reference reads '" + name + "' of rank " + std::to_string(rank) +
                ", which its plan left out");
  if (!it->second.spec) return it->second;
  return RefTensor{make_tensor(*it->second.spec, sc_.dtype, env(rank), sc_.file)};
}

RefTensor Reference::reduce_members(const Step& s, const std::vector<int>& members) {
  // Streaming: one member's input at a time, summed in double (or the dtype's integers) in
  // member order, the backends' tolerance allowed for.
  const RefTensor first = input(s, members[0]);
  const ReduceOp op = s.args().reduce;
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
    // avg: the sum as the dtype holds it (wrapped), then divided truncating toward zero.
    for (int64_t e = 0; e < numel; ++e) {
      set_int(out.value, e, iacc[size_t(e)]);
      if (op == ReduceOp::Avg) set_int(out.value, e, get_int(out.value, e) / n);
    }
    return out;
  }
  double magnitude = 0;
  for (int64_t e = 0; e < numel; ++e) {
    double a = acc[size_t(e)], m = abs_sum[size_t(e)];
    if (op == ReduceOp::Avg) {
      // The sum as the dtype holds it (a float16 sum past 65504 is inf), then divided.
      out.value.set(e, a);
      a = out.value.get(e) / double(n);
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

void Reference::set_result(const Step& s, int rank, const RefTensor& t) {
  if (!wanted(s, rank)) return;
  state_[size_t(rank)][s.output.str()] = t;
  Expected& e = results_[size_t(s.index)][size_t(rank)];
  e.has_result = true;
  e.name = s.output.str();
  e.tensor = t;
}

void Reference::set_object(const Step& s, int rank, nlohmann::ordered_json obj) {
  if (!wanted(s, rank)) return;
  Expected& e = results_[size_t(s.index)][size_t(rank)];
  e.has_result = true;
  e.object = std::move(obj);
}

}  // namespace distrun::scenario
