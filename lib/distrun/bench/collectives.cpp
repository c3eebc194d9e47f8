#include "distrun/bench/collectives.hpp"

#include <algorithm>
#include <cmath>

namespace distrun::bench {

double fill_value(ReduceOp op, int size, int r, int64_t e) {
  // prod: at most one factor 2 per element, so the product stays exact in every dtype.
  if (op == ReduceOp::Prod) return e % size == r ? 2 : 1;
  return double((r + e) % 3 + 1);
}

double reduced_value(ReduceOp op, int size, int64_t e, bool integer) {
  double acc = fill_value(op, size, 0, e);
  int64_t bits = int64_t(acc);
  for (int r = 1; r < size; ++r) {
    const double v = fill_value(op, size, r, e);
    switch (op) {
      case ReduceOp::Prod: acc *= v; break;
      case ReduceOp::Min: acc = std::min(acc, v); break;
      case ReduceOp::Max: acc = std::max(acc, v); break;
      case ReduceOp::BAnd: bits &= int64_t(v); break;
      case ReduceOp::BOr: bits |= int64_t(v); break;
      case ReduceOp::BXor: bits ^= int64_t(v); break;
      default: acc += v; break;
    }
  }
  if (op == ReduceOp::BAnd || op == ReduceOp::BOr || op == ReduceOp::BXor) return double(bits);
  if (op == ReduceOp::Avg) return integer ? std::trunc(acc / size) : acc / size;
  return acc;
}

namespace {

double ring_factor(int n) { return double(n - 1) / n; }
double all_reduce_factor(int n) { return 2.0 * (n - 1) / n; }
double one(int) { return 1.0; }

bool everywhere(const RunArgs&) { return true; }
bool on_root(const RunArgs& a) { return a.rank == a.root; }

// nccl-tests' sendrecv: every rank sends to the next and receives from the previous.
void send_recv(Backend& b, const Tensor& in, Tensor& out, const RunArgs& a) {
  SendOptions o;
  o.timeout = a.timeout;
  auto s = b.isend(in, (a.rank + 1) % a.size, o);
  auto r = b.irecv(out, (a.rank + a.size - 1) % a.size, o);
  s->wait(a.timeout);
  r->wait(a.timeout);
}

double want_reduced(const RunArgs& a, int64_t e, bool integer) { return reduced_value(a.op, a.size, e, integer); }
double want_roots(const RunArgs& a, int64_t e, bool) { return fill_value(a.op, a.size, a.root, e); }
double want_gathered(const RunArgs& a, int64_t e, bool) {
  return fill_value(a.op, a.size, int(e / a.block), e % a.block);
}
double want_own_block_of_roots(const RunArgs& a, int64_t e, bool) {
  return fill_value(a.op, a.size, a.root, a.rank * a.block + e);
}
double want_own_block_reduced(const RunArgs& a, int64_t e, bool integer) {
  return reduced_value(a.op, a.size, a.rank * a.block + e, integer);
}
double want_exchanged(const RunArgs& a, int64_t e, bool) {
  return fill_value(a.op, a.size, int(e / a.block), a.rank * a.block + e % a.block);
}
double want_previous(const RunArgs& a, int64_t e, bool) {
  return fill_value(a.op, a.size, (a.rank + a.size - 1) % a.size, e);
}

// A row of the table: its name, whether it reduces and whether it has a root are the kind's form.
Collective row(CollectiveKind kind, Layout layout, InPlace in_place, double (*bus_factor)(int),
               bool (*has_result)(const RunArgs&), double (*expected)(const RunArgs&, int64_t, bool)) {
  const CollectiveForm& f = form_of(kind);
  return {f.name, kind, layout, in_place, f.reduces, f.rooted, bus_factor, has_result, expected};
}

}  // namespace

const std::vector<Collective>& collectives() {
  using K = CollectiveKind;
  static const std::vector<Collective> table = {
      row(K::AllReduce, Layout::Whole, InPlace::Same, all_reduce_factor, everywhere, want_reduced),
      row(K::AllGather, Layout::Gathers, InPlace::InIsOwnSlot, ring_factor, everywhere, want_gathered),
      row(K::ReduceScatter, Layout::Splits, InPlace::OutIsOwnSlot, ring_factor, everywhere, want_own_block_reduced),
      row(K::AllToAll, Layout::Exchange, InPlace::Staged, ring_factor, everywhere, want_exchanged),
      row(K::Broadcast, Layout::Whole, InPlace::Same, one, everywhere, want_roots),
      row(K::Reduce, Layout::Whole, InPlace::Same, one, on_root, want_reduced),
      row(K::Gather, Layout::Gathers, InPlace::InIsOwnSlot, ring_factor, on_root, want_gathered),
      row(K::Scatter, Layout::Splits, InPlace::OutIsOwnSlot, ring_factor, everywhere, want_own_block_of_roots),
      {"send_recv", std::nullopt, Layout::Whole, InPlace::Staged, false, false, one, everywhere, want_previous},
  };
  return table;
}

void Collective::run(Backend& b, const Tensor& in, Tensor& out, const RunArgs& a) const {
  if (!kind) return send_recv(b, in, out, a);
  CollectiveOp op;
  op.kind = *kind;
  op.timeout = a.timeout;
  op.root = a.root;
  op.reduce = a.op;
  // The in-place kinds (all_reduce, broadcast, reduce, as c10d's) have one buffer: out-of-place
  // is a copy into the output followed by the in-place call, which is what a caller pays.
  if (op.form().buffers == Buffers::InPlace) {
    if (out.data() != in.data()) out.copy_from(in);
  } else {
    op.in = &in;
  }
  op.out = &out;
  b.run(op);
}

const Collective* find_collective(std::string_view name) {
  for (const auto& c : collectives())
    if (name == c.name) return &c;
  return nullptr;
}

std::string collective_names(bool rooted_only) {
  std::string s;
  for (const auto& c : collectives())
    if (c.rooted || !rooted_only) s += (s.empty() ? "" : ", ") + std::string(c.name);
  return s;
}

SizeCount size_count(const Collective& c, int64_t bytes, size_t element_size, int n) {
  const bool split = c.layout != Layout::Whole;
  int64_t count = bytes / int64_t(element_size);
  if (split) count = count / n * n;
  return {count, count * int64_t(element_size)};
}

}  // namespace distrun::bench
