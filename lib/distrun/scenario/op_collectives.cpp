// The tensor collectives and barrier: each op's keys, its simulation (every member's result
// from every member's input, with the checks that need the world) and its run on a Backend.
#include "distrun/comm/collectives.hpp"
#include "distrun/scenario/op_table.hpp"
#include "distrun/scenario/step_runner.hpp"

namespace distrun::scenario {

namespace {

std::string reduce_detail(const Step& s) { return std::string(" (") + reduce_op_name(s.reduce) + ")"; }
std::string from_detail(const Step& s) { return " (from rank " + std::to_string(s.src) + ")"; }

std::vector<RefTensor> member_inputs(Reference& ref, Step& s, const std::vector<int>& members) {
  std::vector<RefTensor> in;
  for (int r : members) in.push_back(ref.input(s, r));
  return in;
}

void require_even_split(Reference& ref, const Step& s, const Tensor& v, int dim, int n, const Shape& shown) {
  if (v.shape()[size_t(dim)] % n != 0)
    ref.fail(s.input.mark, ref.where(s) + ": size " + std::to_string(v.shape()[size_t(dim)]) + " of dim " +
                               std::to_string(dim) + " of " + shape_str(shown) + " does not split into " + std::to_string(n) +
                               " equal chunks");
}

// Chunk g of `t` along dim for each member g, each with t's tolerance.
void scatter_chunks(Reference& ref, const Step& s, const std::vector<int>& members, const RefTensor& t) {
  const int n = int(members.size());
  Tensor v = as_vector(t.value);
  const int dim = ref.check_dim(s, v);
  require_even_split(ref, s, v, dim, n, t.value.shape());
  for (int g = 0; g < n; ++g) ref.set_result(s, members[size_t(g)], RefTensor{v.chunk(dim, g, n).clone(), t.ulps, t.scale});
}

// ---- broadcast

void simulate_broadcast(Reference& ref, Step& s) {
  const auto members = ref.participants(s);
  ref.member_index(s, members, s.src, s.src_mark, "src");
  const RefTensor src = ref.input(s, s.src);
  for (int r : members) ref.set_result(s, r, src);
}

StepOutput run_broadcast(StepRunner& r, const Step& s, Backend& b) {
  Tensor t = r.rank() == s.src ? r.input(s).clone() : r.empty_like_expected(s);
  BroadcastOptions o;
  o.root = b.group_rank(s.src);
  b.broadcast(t, o);
  return {t, {}, {}};
}

// ---- scatter

void simulate_scatter(Reference& ref, Step& s) {
  const auto members = ref.participants(s);
  ref.member_index(s, members, s.src, s.src_mark, "src");
  scatter_chunks(ref, s, members, ref.input(s, s.src));
}

StepOutput run_scatter(StepRunner& r, const Step& s, Backend& b) {
  Tensor in;
  if (r.rank() == s.src) {
    in = r.input(s);
  } else {
    // Only src's values matter; the others pass a buffer of the same shape.
    const Tensor& want = r.expected(s).tensor.value;
    Shape full = want.shape();
    full[size_t(s.dim)] *= b.size();
    in = Tensor::zeros(full, want.dtype(), r.settings().device);
  }
  return {scatter(b, in, b.group_rank(s.src), s.dim), {}, {}};
}

// ---- gather, all_gather

void simulate_gather_any(Reference& ref, Step& s, bool to_one) {
  const auto members = ref.participants(s);
  if (to_one) ref.member_index(s, members, s.dst, s.dst_mark, "dst");
  auto in = member_inputs(ref, s, members);
  const int dim = ref.check_dim(s, as_vector(in[0].value));
  ref.require_same_shapes(s, in, members, -1);
  int64_t out_bytes = 0;
  for (auto& t : in)
    if (__builtin_add_overflow(out_bytes, int64_t(t.value.nbytes()), &out_bytes)) out_bytes = INT64_MAX;
  ref.check_fits(out_bytes, s.mark, ref.where(s) + ": the result");
  std::vector<Tensor> parts;
  RefTensor out;
  for (auto& t : in) {
    parts.push_back(as_vector(t.value));
    out.ulps = std::max(out.ulps, t.ulps);
    out.scale = std::max(out.scale, t.scale);
  }
  out.value = Tensor::cat(parts, dim);
  if (to_one) ref.set_result(s, s.dst, out);
  else
    for (int r : members) ref.set_result(s, r, out);
}

StepOutput run_gather(StepRunner& r, const Step& s, Backend& b) {
  Tensor t = gather(b, r.input(s), b.group_rank(s.dst), s.dim);
  if (r.rank() == s.dst) return {t, {}, {}};
  return {};
}

// ---- reduce, all_reduce, reduce_scatter

RefTensor simulate_reduction(Reference& ref, Step& s, const std::vector<int>& members) {
  return ref.reduce_members(s, members);
}

void simulate_reduce(Reference& ref, Step& s) {
  const auto members = ref.participants(s);
  ref.member_index(s, members, s.dst, s.dst_mark, "dst");
  ref.set_result(s, s.dst, simulate_reduction(ref, s, members));
}

StepOutput run_reduce(StepRunner& r, const Step& s, Backend& b) {
  Tensor t = r.input(s).clone();
  ReduceOptions o;
  o.root = b.group_rank(s.dst);
  o.op = s.reduce;
  b.reduce(t, o);
  if (r.rank() == s.dst) return {t, {}, {}};
  return {};
}

void simulate_all_reduce(Reference& ref, Step& s) {
  const auto members = ref.participants(s);
  const RefTensor red = simulate_reduction(ref, s, members);
  for (int r : members) ref.set_result(s, r, red);
}

StepOutput run_all_reduce(StepRunner& r, const Step& s, Backend& b) {
  Tensor t = r.input(s).clone();
  AllreduceOptions o;
  o.op = s.reduce;
  b.all_reduce(t, o);
  return {t, {}, {}};
}

void simulate_reduce_scatter(Reference& ref, Step& s) {
  const auto members = ref.participants(s);
  scatter_chunks(ref, s, members, simulate_reduction(ref, s, members));
}

// ---- all_to_all

void simulate_all_to_all(Reference& ref, Step& s) {
  const auto members = ref.participants(s);
  const int n = int(members.size());
  auto in = member_inputs(ref, s, members);
  const int dim = ref.check_dim(s, as_vector(in[0].value));
  ref.require_same_shapes(s, in, members, dim);
  // splits[r][j]: how much of rank r's input (along dim) goes to group rank j.
  std::vector<std::vector<int64_t>> splits(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    const int64_t extent = as_vector(in[size_t(r)].value).shape()[size_t(dim)];
    const std::string on_rank = " on rank " + std::to_string(members[size_t(r)]);
    if (!s.has_split_sizes) {
      if (extent % n != 0)
        ref.fail(s.input.mark, ref.where(s) + ": size " + std::to_string(extent) + " of dim " + std::to_string(dim) +
                                   on_rank + " does not split into " + std::to_string(n) +
                                   " equal chunks (give split_sizes for uneven splits)");
      splits[size_t(r)].assign(size_t(n), extent / n);
      continue;
    }
    if (int(s.split_sizes.size()) != n)
      ref.fail(s.split_mark, ref.where(s) + ": split_sizes has " + std::to_string(s.split_sizes.size()) + " entries for " +
                                 std::to_string(n) + " ranks");
    int64_t total = 0;
    for (const auto& num : s.split_sizes) {
      const double v = eval_number(num, ref.env(members[size_t(r)]));
      if (!(v >= 0) || v != std::floor(v) || v > 1e15)
        ref.fail(num.mark, ref.where(s) + ": a split size must be a whole number of 0 or more, got " + std::to_string(v) +
                               on_rank);
      splits[size_t(r)].push_back(int64_t(v));
      total += int64_t(v);
    }
    if (total != extent)
      ref.fail(s.split_mark, ref.where(s) + ": split_sizes add up to " + std::to_string(total) + on_rank + " but dim " +
                                 std::to_string(dim) + " has " + std::to_string(extent));
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
    ref.set_result(s, members[size_t(j)], out);
  }
}

StepOutput run_all_to_all(StepRunner& r, const Step& s, Backend& b) {
  std::vector<int64_t> splits;
  for (const auto& n : s.split_sizes) splits.push_back(int64_t(eval_number(n, r.env())));
  return {all_to_all(b, r.input(s), s.dim, splits), {}, {}};
}

// ---- send_recv

void simulate_send_recv(Reference& ref, Step& s) {
  const auto members = ref.participants(s);
  ref.member_index(s, members, s.src, s.src_mark, "src");
  ref.member_index(s, members, s.dst, s.dst_mark, "dst");
  ref.set_result(s, s.dst, ref.input(s, s.src));
}

StepOutput run_send_recv(StepRunner& r, const Step& s, Backend& b) {
  SendOptions o;
  o.tag = s.index;
  if (r.rank() == s.src) {
    Tensor t = r.input(s);
    if (s.async) b.isend(t, b.group_rank(s.dst), o)->wait();
    else b.send(t, b.group_rank(s.dst), o);
  } else if (r.rank() == s.dst) {
    Tensor t = r.empty_like_expected(s);
    if (s.async) b.irecv(t, b.group_rank(s.src), o)->wait();
    else b.recv(t, b.group_rank(s.src), o);
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
  ops.back().simulate = simulate_broadcast;
  ops.back().run = run_broadcast;
  ops.back().picture = [](const Step& s, const std::vector<int>& m) { return whole_from(s, m, s.src, false); };

  ops.push_back({Op::Scatter, "scatter", keys({"src", "dim"}), {"input"}});
  ops.back().simulate = simulate_scatter;
  ops.back().run = run_scatter;
  ops.back().picture = [](const Step& s, const std::vector<int>& m) { return scatter_picture(s, m, false); };

  ops.push_back({Op::Gather, "gather", keys({"dst", "dim"}), {"input"}});
  ops.back().simulate = [](Reference& ref, Step& s) { simulate_gather_any(ref, s, true); };
  ops.back().run = run_gather;
  ops.back().picture = [](const Step& s, const std::vector<int>& m) { return gather_picture(s, m, s.dst); };

  ops.push_back({Op::AllGather, "all_gather", keys({"dim"}), {"input"}});
  ops.back().simulate = [](Reference& ref, Step& s) { simulate_gather_any(ref, s, false); };
  ops.back().run = [](StepRunner& r, const Step& s, Backend& b) { return StepOutput{all_gather(b, r.input(s), s.dim), {}, {}}; };
  ops.back().picture = [](const Step& s, const std::vector<int>& m) { return gather_picture(s, m, -1); };

  ops.push_back({Op::Reduce, "reduce", keys({"dst", "reduce"}), {"input"}});
  ops.back().simulate = simulate_reduce;
  ops.back().run = run_reduce;
  ops.back().picture = [](const Step& s, const std::vector<int>& m) { return reduce_picture(s, m, s.dst); };
  ops.back().header_detail = reduce_detail;

  ops.push_back({Op::AllReduce, "all_reduce", keys({"reduce"}), {"input"}});
  ops.back().simulate = simulate_all_reduce;
  ops.back().run = run_all_reduce;
  ops.back().picture = [](const Step& s, const std::vector<int>& m) { return reduce_picture(s, m, -1); };
  ops.back().header_detail = reduce_detail;

  ops.push_back({Op::ReduceScatter, "reduce_scatter", keys({"dim", "reduce"}), {"input"}});
  ops.back().simulate = simulate_reduce_scatter;
  ops.back().run = [](StepRunner& r, const Step& s, Backend& b) {
    return StepOutput{reduce_scatter(b, r.input(s), s.dim, s.reduce), {}, {}};
  };
  ops.back().picture = [](const Step& s, const std::vector<int>& m) { return scatter_picture(s, m, true); };
  ops.back().header_detail = reduce_detail;

  ops.push_back({Op::AllToAll, "all_to_all", keys({"dim", "split_sizes"}), {"input"}});
  ops.back().simulate = simulate_all_to_all;
  ops.back().run = run_all_to_all;
  ops.back().picture = [](const Step& s, const std::vector<int>& m) { return all_to_all_picture(s, m); };

  ops.push_back({Op::SendRecv, "send_recv", keys({"src", "dst", "async"}), {"input", "src", "dst"}});
  ops.back().simulate = simulate_send_recv;
  ops.back().run = run_send_recv;
  ops.back().picture = [](const Step& s, const std::vector<int>& m) { return whole_from(s, m, s.src, true); };
  ops.back().header_detail = from_detail;

  ops.push_back({Op::Barrier, "barrier", {}, {}});
  ops.back().simulate = [](Reference&, Step&) {};
  ops.back().run = [](StepRunner&, const Step&, Backend& b) {
    b.barrier(BarrierOptions{});
    return StepOutput{};
  };
  return ops;
}

}  // namespace distrun::scenario
