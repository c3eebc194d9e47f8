// The per-rank ops: map (an elementwise expression over a rank's tensors) and local_reduce
// (torch.sum/mean/... along a dim): no communication, but the same description as any op.
#include <cmath>

#include "distrun/scenario/check/validation.hpp"
#include "distrun/scenario/model/op_table.hpp"
#include "distrun/scenario/ops/ops.hpp"
#include "distrun/scenario/ops/step_runner.hpp"

namespace distrun::scenario {

namespace {

bool floating(DType t) { return !is_integer(t); }

double propagated_error(Reference& ref, const Step& s, const std::map<std::string, Tensor>& inputs, const Shape& shape,
                        int rank) {
  // How far the map's result can move when each input moves within its own tolerance: the
  // map evaluated (in float64) with one input shifted up and down by twice its allowed
  // error, the others held. This follows steep functions (exp(s) amplifies an ulp of s by s)
  // where a fixed number of ulps would not.
  const Reference::State& st = ref.state(rank);
  const Tensor base = apply_map(*s.args().more().expr, inputs, shape, DType::Float64, ref.env(rank),
                                ref.scenario().file, s.at(s.args().more().expr_mark));
  std::vector<double> err(size_t(base.numel()), 0.0);
  for (const auto& [name, t] : inputs) {
    const RefTensor& tol = st.at(name);  // a tensor still as its spec made it is exact (ulps 0)
    if (tol.spec || tol.ulps == 0 || is_integer(t.dtype())) continue;
    const double eps = dtype_epsilon(t.dtype());
    for (const double sign : {1.0, -1.0}) {
      Tensor moved = Tensor::empty(t.shape(), DType::Float64);
      for (int64_t e = 0; e < t.numel(); ++e) {
        const double x = t.get(e);
        moved.set(e, x + sign * 2 * tol.ulps * eps * std::max(std::fabs(x), tol.scale));
      }
      auto shifted = inputs;
      shifted[name] = moved;
      const Tensor y = apply_map(*s.args().more().expr, shifted, shape, DType::Float64, ref.env(rank),
                                 ref.scenario().file, s.at(s.args().more().expr_mark));
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

// The shape and dtype a map gives on `rank`, with every check: names it reads are tensors of
// the rank, of one shape (or one element), or the output already exists to take its shape.
void validate_map_on_rank(Validation& v, const Step& s, int rank) {
  std::optional<Shape> shape;
  std::optional<TensorMeta> first;
  for (const auto& name : map_tensor_names(*s.args().more().expr)) {
    const TensorMeta* t = v.tensor(rank, name);
    if (!t) {
      std::vector<std::string> names = {"rank", "world_size", "local_rank", "local_world_size", "i", "j", "k", "idx"};
      for (const auto& n : v.names(rank)) names.push_back(n);
      v.fail(s.at(s.args().more().expr_mark), v.where(s) + ": '" + name + "' in expr is not a tensor defined on rank " +
                                                  std::to_string(rank) + " nor a known name" +
                                                  did_you_mean(name, names));
    }
    if (!first) first = *t;
    if (numel_of(t->shape) != 1) {
      if (shape && *shape != t->shape)
        v.fail(s.at(s.args().more().expr_mark), v.where(s) + ": tensors in expr have different shapes on rank " +
                                                    std::to_string(rank) + ": " + shape_str(*shape) + " and " +
                                                    shape_str(t->shape) + " ('" + name + "')");
      shape = t->shape;
    }
  }
  const TensorMeta* old_out = v.tensor(rank, s.output.str());
  if (!shape) {
    if (first)
      shape = first->shape;
    else if (old_out)
      shape = old_out->shape;
    else
      v.fail(s.at(s.args().more().expr_mark), v.where(s) + ": expr names no tensor and output '" + s.output.str() +
                                                  "' does not exist on rank " + std::to_string(rank) +
                                                  ", so its shape is unknown");
  }
  const DType dtype = s.args().more().dtype ? *s.args().more().dtype
                      : first               ? first->dtype
                      : old_out             ? old_out->dtype
                                            : v.scenario().dtype;
  v.set_result(s, rank, {*shape, dtype});
}

void map_on_rank(Reference& ref, const Step& s, int rank) {
  std::map<std::string, Tensor> inputs;
  std::optional<Shape> shape;
  std::optional<DType> first_dtype;
  double ulps = 0, scale = 0;
  for (const auto& name : map_tensor_names(*s.args().more().expr)) {
    const RefTensor held = *ref.tensor(rank, name);
    const Tensor& t = held.value;
    inputs[name] = t;
    ulps = std::max(ulps, held.ulps);
    scale = std::max(scale, held.scale);
    if (!first_dtype) first_dtype = t.dtype();
    if (t.numel() != 1) shape = t.shape();
  }
  const std::optional<RefTensor> old_out = ref.tensor(rank, s.output.str());
  if (!shape) shape = !inputs.empty() ? inputs.begin()->second.shape() : old_out->value.shape();
  DType dtype = s.args().more().dtype ? *s.args().more().dtype
                : first_dtype         ? *first_dtype
                : old_out             ? old_out->value.dtype()
                                      : ref.scenario().dtype;
  RefTensor out{apply_map(*s.args().more().expr, inputs, *shape, dtype, ref.env(rank), ref.scenario().file,
                          s.at(s.args().more().expr_mark))};
  if (floating(dtype) && ulps > 0) {
    // Inexact inputs: allow their error to grow through the expression (exp, log, division).
    for (const auto& kv : inputs)
      for (int64_t e = 0; e < kv.second.numel(); ++e) scale = std::max(scale, std::fabs(kv.second.get(e)));
    for (int64_t e = 0; e < out.value.numel(); ++e) scale = std::max(scale, std::fabs(out.value.get(e)));
    out.ulps = 4 * ulps + 8;
    out.scale = std::max(scale, propagated_error(ref, s, inputs, *shape, rank) / (out.ulps * dtype_epsilon(dtype)));
  }
  ref.set_result(s, rank, out);
}

void validate_map(Validation& v, const Step& s) {
  if (s.args().more().ranks)
    for (int r : *s.args().more().ranks)
      if (r < 0 || r >= v.world_size())
        v.fail(s.at(s.args().more().ranks_mark), v.where(s) + ": rank " + std::to_string(r) +
                                                     " in ranks is out of range for a world of " +
                                                     ranks_str(v.world_size()));
  for (int r : v.result_ranks(s)) validate_map_on_rank(v, s, r);
}

void simulate_map(Reference& ref, const Step& s) {
  for (int r : ref.result_ranks(s))
    if (ref.wanted(s, r)) map_on_rank(ref, s, r);
}

StepOutput run_map(StepRunner& r, const Step& s, Backend&) {
  if (s.args().more().ranks &&
      std::find(s.args().more().ranks->begin(), s.args().more().ranks->end(), r.rank()) == s.args().more().ranks->end())
    return {};
  std::map<std::string, Tensor> inputs;
  for (const auto& name : map_tensor_names(*s.args().more().expr)) inputs[name] = to_cpu(r.tensor(name));
  const Tensor& shape_of = r.expected(s).tensor.value;
  return {apply_map(*s.args().more().expr, inputs, shape_of.shape(), shape_of.dtype(), r.env(), r.scenario().file,
                    s.at(s.args().more().expr_mark))
              .to(r.settings().device),
          {},
          {}};
}

void validate_local_reduce(Validation& v, const Step& s) {
  for (int r : v.participants(s)) {
    const TensorMeta in = v.input(s, r);
    if (s.args().local_dim && *s.args().local_dim >= int(in.shape.size()))
      v.fail(s.at(s.args().dim_mark), v.where(s) + ": dim " + std::to_string(*s.args().local_dim) +
                                          " is out of range for shape " + shape_str(in.shape));
    // torch.sum/prod of a bool tensor count in int64 and torch.mean refuses bool: no one meaning
    // in the dtype, so the step asks for a map to an integer dtype first.
    if (in.dtype == DType::Bool)
      v.fail(s.mark, v.where(s) + ": local_reduce of a bool tensor (map it to an integer dtype first)");
    v.set_result(s, r, {local_reduce_shape(in.shape, s.args().local_dim, s.args().keepdim), in.dtype});
  }
}

void simulate_local_reduce(Reference& ref, const Step& s) {
  for (int r : ref.participants(s)) {
    if (!ref.wanted(s, r)) continue;
    RefTensor in = ref.input(s, r);
    RefTensor out{local_reduce(in.value, s.args().reduce, s.args().local_dim, s.args().keepdim), in.ulps, in.scale};
    if (floating(in.value.dtype()) && s.args().reduce != ReduceOp::Min && s.args().reduce != ReduceOp::Max) {
      const int64_t count = s.args().local_dim ? in.value.shape()[size_t(*s.args().local_dim)] : in.value.numel();
      double mag = 0;
      for (int64_t e = 0; e < in.value.numel(); ++e) mag += std::fabs(in.value.get(e));
      out.ulps += 2.0 * double(count) + 2;
      out.scale = std::max(out.scale, s.args().reduce == ReduceOp::Prod ? 0.0 : mag);
    }
    ref.set_result(s, r, out);
  }
}

StepOutput run_local_reduce(StepRunner& r, const Step& s, Backend&) {
  return {local_reduce(to_cpu(r.input(s)), s.args().reduce, s.args().local_dim, s.args().keepdim)
              .to(r.settings().device),
          {},
          {}};
}

}  // namespace

std::vector<OpSpec> local_ops() {
  std::vector<OpSpec> ops;
  ops.push_back({Op::Map, "map", {"expr", "output", "ranks", "dtype"}, {"expr", "output"}});
  ops.back().reads = Reads::Own;
  ops.back().validate = validate_map;
  ops.back().simulate = simulate_map;
  ops.back().run = run_map;

  ops.push_back({Op::LocalReduce, "local_reduce", {"input", "output", "reduce", "dim", "keepdim"}, {"input"}});
  ops.back().whole_tensor_dim = true;
  ops.back().local_reduce_ops = true;
  ops.back().reads = Reads::Own;
  ops.back().validate = validate_local_reduce;
  ops.back().simulate = simulate_local_reduce;
  ops.back().run = run_local_reduce;
  ops.back().header_detail = [](const Step& s) { return std::string(" (") + reduce_op_name(s.args().reduce) + ")"; };
  return ops;
}

}  // namespace distrun::scenario
