// The tensor collectives and barrier: each op's keys, its validation (the checks that need the
// world, on shapes), its simulation (the wanted members' results from the members' inputs) and
// its run on a Backend.
#include <cmath>
#include <optional>

#include "distrun/comm/collectives.hpp"
#include "distrun/scenario/check/validation.hpp"
#include "distrun/scenario/model/limits.hpp"
#include "distrun/scenario/model/op_table.hpp"
#include "distrun/scenario/ops/ops.hpp"
#include "distrun/scenario/ops/step_runner.hpp"
#include "distrun/scenario/output/explain.hpp"

namespace distrun::scenario {

namespace {

std::string reduce_detail(const Step& s) { return std::string(" (") + reduce_op_name(s.args().reduce) + ")"; }
std::string from_detail(const Step& s) { return " (from rank " + std::to_string(s.args().src) + ")"; }

std::vector<RefTensor> member_inputs(Reference& ref, const Step& s, const std::vector<int>& members) {
  std::vector<RefTensor> in;
  for (int r : members) in.push_back(ref.input(s, r));
  return in;
}

void validate_scatter_chunks(Validation& v, const Step& s, const std::vector<int>& members, const TensorMeta& t) {
  const int n = int(members.size());
  Shape chunk = as_vector_shape(t.shape);
  const int dim = v.check_dim(s, chunk);
  v.require_even_split(s, chunk, dim, n, t.shape);
  chunk[size_t(dim)] /= n;
  for (int r : members) v.set_result(s, r, {chunk, t.dtype});
}

// Chunk g of `t` along dim for each wanted member g, each with t's tolerance.
void scatter_chunks(Reference& ref, const Step& s, const std::vector<int>& members, const RefTensor& t) {
  const int n = int(members.size());
  Tensor v = as_vector(t.value);
  for (int g = 0; g < n; ++g)
    if (ref.wanted(s, members[size_t(g)]))
      ref.set_result(s, members[size_t(g)], RefTensor{v.chunk(s.args().dim, g, n).clone(), t.ulps, t.scale});
}

// ---- broadcast

void validate_broadcast(Validation& v, const Step& s) {
  const auto members = v.participants(s);
  v.member_index(s, members, s.args().src, s.at(s.args().src_mark), "src");
  const TensorMeta src = v.input(s, s.args().src);
  for (int r : members) v.set_result(s, r, src);
}

void simulate_broadcast(Reference& ref, const Step& s) {
  const RefTensor src = ref.input(s, s.args().src);
  for (int r : ref.participants(s)) ref.set_result(s, r, src);
}

StepOutput run_broadcast(StepRunner& r, const Step& s, Backend& b) {
  Tensor t = r.rank() == s.args().src ? r.input(s).clone() : r.empty_like_expected(s);
  BroadcastOptions o;
  o.root = b.group_rank(s.args().src);
  b.broadcast(t, o);
  return {t, {}, {}};
}

// ---- scatter

void validate_scatter(Validation& v, const Step& s) {
  const auto members = v.participants(s);
  v.member_index(s, members, s.args().src, s.at(s.args().src_mark), "src");
  validate_scatter_chunks(v, s, members, v.input(s, s.args().src));
}

void simulate_scatter(Reference& ref, const Step& s) {
  scatter_chunks(ref, s, ref.participants(s), ref.input(s, s.args().src));
}

StepOutput run_scatter(StepRunner& r, const Step& s, Backend& b) {
  Tensor in;
  if (r.rank() == s.args().src) {
    in = r.input(s);
  } else {
    // Only src's values matter; the others pass a buffer of the same shape.
    const Tensor& want = r.expected(s).tensor.value;
    Shape full = want.shape();
    full[size_t(s.args().dim)] *= b.size();
    in = Tensor::zeros(full, want.dtype(), r.settings().device);
  }
  return {scatter(b, in, b.group_rank(s.args().src), s.args().dim), {}, {}};
}

// ---- gather, all_gather

void validate_gather_any(Validation& v, const Step& s, bool to_one) {
  const auto members = v.participants(s);
  if (to_one) v.member_index(s, members, s.args().dst, s.at(s.args().dst_mark), "dst");
  const auto in = v.inputs(s, members);
  Shape out = as_vector_shape(in[0].shape);
  const int dim = v.check_dim(s, out);
  v.require_same_shapes(s, in, members, -1);
  int64_t out_bytes = 0;
  for (const auto& t : in)
    if (__builtin_add_overflow(out_bytes, *checked_bytes(t.shape, t.dtype), &out_bytes)) out_bytes = INT64_MAX;
  v.check_fits(out_bytes, s.mark, v.where(s) + ": the result");
  out[size_t(dim)] *= int64_t(members.size());
  if (to_one)
    v.set_result(s, s.args().dst, {out, in[0].dtype});
  else
    for (int r : members) v.set_result(s, r, {out, in[0].dtype});
}

void simulate_gather_any(Reference& ref, const Step& s, bool to_one) {
  const auto members = ref.participants(s);
  auto in = member_inputs(ref, s, members);
  std::vector<Tensor> parts;
  RefTensor out;
  for (auto& t : in) {
    parts.push_back(as_vector(t.value));
    out.ulps = std::max(out.ulps, t.ulps);
    out.scale = std::max(out.scale, t.scale);
  }
  out.value = Tensor::cat(parts, s.args().dim);
  if (to_one)
    ref.set_result(s, s.args().dst, out);
  else
    for (int r : members) ref.set_result(s, r, out);
}

StepOutput run_gather(StepRunner& r, const Step& s, Backend& b) {
  Tensor t = gather(b, r.input(s), b.group_rank(s.args().dst), s.args().dim);
  if (r.rank() == s.args().dst) return {t, {}, {}};
  return {};
}

// ---- reduce, all_reduce, reduce_scatter

void validate_reduction(Validation& v, const Step& s, bool to_one, bool scattered) {
  const auto members = v.participants(s);
  if (to_one) v.member_index(s, members, s.args().dst, s.at(s.args().dst_mark), "dst");
  const TensorMeta first = v.input(s, members[0]);
  v.check_reduce(s, first.dtype);
  for (size_t k = 1; k < members.size(); ++k)
    v.require_same_shapes(s, {first, v.input(s, members[k])}, {members[0], members[k]}, -1);
  if (scattered)
    validate_scatter_chunks(v, s, members, first);
  else if (to_one)
    v.set_result(s, s.args().dst, first);
  else
    for (int r : members) v.set_result(s, r, first);
}

void simulate_reduce(Reference& ref, const Step& s) {
  ref.set_result(s, s.args().dst, ref.reduce_members(s, ref.participants(s)));
}

StepOutput run_reduce(StepRunner& r, const Step& s, Backend& b) {
  Tensor t = r.input(s).clone();
  ReduceOptions o;
  o.root = b.group_rank(s.args().dst);
  o.op = s.args().reduce;
  b.reduce(t, o);
  if (r.rank() == s.args().dst) return {t, {}, {}};
  return {};
}

void simulate_all_reduce(Reference& ref, const Step& s) {
  const auto members = ref.participants(s);
  const RefTensor red = ref.reduce_members(s, members);
  for (int r : members) ref.set_result(s, r, red);
}

StepOutput run_all_reduce(StepRunner& r, const Step& s, Backend& b) {
  Tensor t = r.input(s).clone();
  AllreduceOptions o;
  o.op = s.args().reduce;
  b.all_reduce(t, o);
  return {t, {}, {}};
}

void simulate_reduce_scatter(Reference& ref, const Step& s) {
  const auto members = ref.participants(s);
  scatter_chunks(ref, s, members, ref.reduce_members(s, members));
}

// ---- all_to_all

// A step's split_sizes on any rank, each expression compiled once for the step. Evaluated
// rank by rank through the per-thread cache of a few compiled copies, n expressions would
// cycle through it and each be compiled again on every rank (1024 ranks took 112 s).
class SplitSizes {
 public:
  explicit SplitSizes(const Step& s) : s_(s) {
    for (const auto& num : s.args().more().split_sizes)
      compiled_.push_back(num.expr ? std::optional(num.expr->evaluator()) : std::nullopt);
  }
  double at(size_t j, const RankEnv& env) {
    const Number& num = s_.args().more().split_sizes[j];
    if (!compiled_[j]) return num.value;
    compiled_[j]->set(bind_env(*num.expr, env));
    return compiled_[j]->eval();
  }
  // How much of the input (along dim) of the rank `env` goes to each member: its split_sizes,
  // else even.
  std::vector<int64_t> of(const RankEnv& env, int64_t extent, int n) {
    if (!s_.args().more().has_split_sizes) return std::vector<int64_t>(size_t(n), extent / n);
    std::vector<int64_t> out;
    for (size_t j = 0; j < s_.args().more().split_sizes.size(); ++j) out.push_back(int64_t(at(j, env)));
    return out;
  }

 private:
  const Step& s_;
  std::vector<std::optional<Expression::Evaluator>> compiled_;
};

void validate_all_to_all(Validation& v, const Step& s) {
  const auto members = v.participants(s);
  const int n = int(members.size());
  const auto in = v.inputs(s, members);
  const int dim = v.check_dim(s, as_vector_shape(in[0].shape));
  v.require_same_shapes(s, in, members, dim);
  // What each member receives along dim: the sum over senders of their split for it.
  std::vector<int64_t> received(static_cast<size_t>(n), 0);
  SplitSizes splits(s);
  for (int r = 0; r < n; ++r) {
    const int64_t extent = as_vector_shape(in[size_t(r)].shape)[size_t(dim)];
    const std::string on_rank = " on rank " + std::to_string(members[size_t(r)]);
    if (!s.args().more().has_split_sizes) {
      if (extent % n != 0)
        v.fail(s.at(s.args().input.mark), v.where(s) + ": size " + std::to_string(extent) + " of dim " +
                                              std::to_string(dim) + on_rank + " does not split into " +
                                              std::to_string(n) + " equal chunks (give split_sizes for uneven splits)");
      for (auto& x : received) x += extent / n;
      continue;
    }
    if (int(s.args().more().split_sizes.size()) != n)
      v.fail(s.at(s.args().more().split_mark), v.where(s) + ": split_sizes has " +
                                                   std::to_string(s.args().more().split_sizes.size()) +
                                                   " entries for " + std::to_string(n) + " ranks");
    int64_t total = 0;
    for (size_t j = 0; j < s.args().more().split_sizes.size(); ++j) {
      const Number& num = s.args().more().split_sizes[j];
      const double x = splits.at(j, v.env(members[size_t(r)]));
      if (!(x >= 0) || x != std::floor(x) || x > 1e15)
        v.fail(s.at(num.mark),
               v.where(s) + ": a split size must be a whole number of 0 or more, got " + std::to_string(x) + on_rank);
      total += int64_t(x);
      received[j] += int64_t(x);
    }
    if (total != extent)
      v.fail(s.at(s.args().more().split_mark), v.where(s) + ": split_sizes add up to " + std::to_string(total) +
                                                   on_rank + " but dim " + std::to_string(dim) + " has " +
                                                   std::to_string(extent));
  }
  for (int j = 0; j < n; ++j) {
    Shape out = as_vector_shape(in[0].shape);
    out[size_t(dim)] = received[size_t(j)];
    v.set_result(s, members[size_t(j)], {out, in[0].dtype});
  }
}

void simulate_all_to_all(Reference& ref, const Step& s) {
  const auto members = ref.participants(s);
  const int n = int(members.size());
  // One sender at a time: its block for each wanted receiver (a worker wants one).
  std::vector<std::vector<Tensor>> parts(static_cast<size_t>(n));
  std::vector<RefTensor> out(static_cast<size_t>(n));
  SplitSizes split_sizes(s);
  for (int r = 0; r < n; ++r) {
    const RefTensor t = ref.input(s, members[size_t(r)]);
    const Tensor v = as_vector(t.value);
    const auto splits = split_sizes.of(ref.env(members[size_t(r)]), v.shape()[size_t(s.args().dim)], n);
    int64_t start = 0;
    for (int j = 0; j < n; ++j) {
      if (ref.wanted(s, members[size_t(j)])) {
        parts[size_t(j)].push_back(v.slice(s.args().dim, start, splits[size_t(j)]).clone());
        out[size_t(j)].ulps = std::max(out[size_t(j)].ulps, t.ulps);
        out[size_t(j)].scale = std::max(out[size_t(j)].scale, t.scale);
      }
      start += splits[size_t(j)];
    }
  }
  for (int j = 0; j < n; ++j)
    if (ref.wanted(s, members[size_t(j)])) {
      out[size_t(j)].value = Tensor::cat(parts[size_t(j)], s.args().dim);
      ref.set_result(s, members[size_t(j)], out[size_t(j)]);
    }
}

StepOutput run_all_to_all(StepRunner& r, const Step& s, Backend& b) {
  std::vector<int64_t> splits;
  SplitSizes split_sizes(s);
  for (size_t j = 0; j < s.args().more().split_sizes.size(); ++j) splits.push_back(int64_t(split_sizes.at(j, r.env())));
  return {all_to_all(b, r.input(s), s.args().dim, splits), {}, {}};
}

// ---- send_recv

void validate_send_recv(Validation& v, const Step& s) {
  const auto members = v.participants(s);
  v.member_index(s, members, s.args().src, s.at(s.args().src_mark), "src");
  v.member_index(s, members, s.args().dst, s.at(s.args().dst_mark), "dst");
  v.set_result(s, s.args().dst, v.input(s, s.args().src));
}

void simulate_send_recv(Reference& ref, const Step& s) { ref.set_result(s, s.args().dst, ref.input(s, s.args().src)); }

StepOutput run_send_recv(StepRunner& r, const Step& s, Backend& b) {
  SendOptions o;
  o.tag = s.index;
  if (r.rank() == s.args().src) {
    Tensor t = r.input(s);
    if (s.args().async)
      b.isend(t, b.group_rank(s.args().dst), o)->wait();
    else
      b.send(t, b.group_rank(s.args().dst), o);
  } else if (r.rank() == s.args().dst) {
    Tensor t = r.empty_like_expected(s);
    if (s.args().async)
      b.irecv(t, b.group_rank(s.args().src), o)->wait();
    else
      b.recv(t, b.group_rank(s.args().src), o);
    return {t, {}, {}};
  }
  return {};
}

}  // namespace

std::vector<OpSpec> collective_ops() {
  const std::vector<std::string> input = {"input", "output"};
  auto keys = [&](std::vector<std::string> more) {
    more.insert(more.begin(), input.begin(), input.end());
    return more;
  };
  std::vector<OpSpec> ops;
  ops.push_back({Op::Broadcast, "broadcast", keys({"src"}), {"input"}});
  ops.back().validate = validate_broadcast;
  ops.back().reads = Reads::Src;
  ops.back().simulate = simulate_broadcast;
  ops.back().run = run_broadcast;
  ops.back().picture = [](const Step& s, const std::vector<int>& m) { return whole_from(s, m, s.args().src, false); };

  ops.push_back({Op::Scatter, "scatter", keys({"src", "dim"}), {"input"}});
  ops.back().validate = validate_scatter;
  ops.back().reads = Reads::Src;
  ops.back().simulate = simulate_scatter;
  ops.back().run = run_scatter;
  ops.back().picture = [](const Step& s, const std::vector<int>& m) { return scatter_picture(s, m, false); };

  ops.push_back({Op::Gather, "gather", keys({"dst", "dim"}), {"input"}});
  ops.back().result_at = ResultAt::Dst;
  ops.back().reads = Reads::EveryMember;
  ops.back().validate = [](Validation& v, const Step& s) { validate_gather_any(v, s, true); };
  ops.back().simulate = [](Reference& ref, const Step& s) { simulate_gather_any(ref, s, true); };
  ops.back().run = run_gather;
  ops.back().picture = [](const Step& s, const std::vector<int>& m) { return gather_picture(s, m, s.args().dst); };

  ops.push_back({Op::AllGather, "all_gather", keys({"dim"}), {"input"}});
  ops.back().reads = Reads::EveryMember;
  ops.back().validate = [](Validation& v, const Step& s) { validate_gather_any(v, s, false); };
  ops.back().simulate = [](Reference& ref, const Step& s) { simulate_gather_any(ref, s, false); };
  ops.back().run = [](StepRunner& r, const Step& s, Backend& b) {
    return StepOutput{all_gather(b, r.input(s), s.args().dim), {}, {}};
  };
  ops.back().picture = [](const Step& s, const std::vector<int>& m) { return gather_picture(s, m, -1); };

  ops.push_back({Op::Reduce, "reduce", keys({"dst", "reduce"}), {"input"}});
  ops.back().result_at = ResultAt::Dst;
  ops.back().reads = Reads::EveryMember;
  ops.back().validate = [](Validation& v, const Step& s) { validate_reduction(v, s, true, false); };
  ops.back().simulate = simulate_reduce;
  ops.back().run = run_reduce;
  ops.back().picture = [](const Step& s, const std::vector<int>& m) { return reduce_picture(s, m, s.args().dst); };
  ops.back().header_detail = reduce_detail;

  ops.push_back({Op::AllReduce, "all_reduce", keys({"reduce"}), {"input"}});
  ops.back().reads = Reads::EveryMember;
  ops.back().validate = [](Validation& v, const Step& s) { validate_reduction(v, s, false, false); };
  ops.back().simulate = simulate_all_reduce;
  ops.back().run = run_all_reduce;
  ops.back().picture = [](const Step& s, const std::vector<int>& m) { return reduce_picture(s, m, -1); };
  ops.back().header_detail = reduce_detail;

  ops.push_back({Op::ReduceScatter, "reduce_scatter", keys({"dim", "reduce"}), {"input"}});
  ops.back().reads = Reads::EveryMember;
  ops.back().validate = [](Validation& v, const Step& s) { validate_reduction(v, s, false, true); };
  ops.back().simulate = simulate_reduce_scatter;
  ops.back().run = [](StepRunner& r, const Step& s, Backend& b) {
    return StepOutput{reduce_scatter(b, r.input(s), s.args().dim, s.args().reduce), {}, {}};
  };
  ops.back().picture = [](const Step& s, const std::vector<int>& m) { return scatter_picture(s, m, true); };
  ops.back().header_detail = reduce_detail;

  ops.push_back({Op::AllToAll, "all_to_all", keys({"dim", "split_sizes"}), {"input"}});
  ops.back().reads = Reads::EveryMember;
  ops.back().validate = validate_all_to_all;
  ops.back().simulate = simulate_all_to_all;
  ops.back().run = run_all_to_all;
  ops.back().picture = [](const Step& s, const std::vector<int>& m) { return all_to_all_picture(s, m); };

  ops.push_back({Op::SendRecv, "send_recv", keys({"src", "dst", "async"}), {"input", "src", "dst"}});
  ops.back().result_at = ResultAt::Dst;
  ops.back().reads = Reads::Src;
  ops.back().validate = validate_send_recv;
  ops.back().simulate = simulate_send_recv;
  ops.back().run = run_send_recv;
  ops.back().picture = [](const Step& s, const std::vector<int>& m) { return whole_from(s, m, s.args().src, true); };
  ops.back().header_detail = from_detail;

  ops.push_back({Op::Barrier, "barrier", {}, {}});
  ops.back().result_at = ResultAt::None;
  ops.back().validate = [](Validation&, const Step&) {};
  ops.back().simulate = [](Reference&, const Step&) {};
  ops.back().run = [](StepRunner&, const Step&, Backend& b) {
    b.barrier(BarrierOptions{});
    return StepOutput{};
  };
  return ops;
}

}  // namespace distrun::scenario
