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

// The backend's all_reduce, broadcast and reduce work in place (as c10d's): out-of-place is
// a copy into the output followed by the in-place call, which is what a caller pays.
void into_out(const Tensor& in, Tensor& out) {
  if (out.data() != in.data()) out.copy_from(in);
}

void run_all_reduce(Backend& b, const Tensor& in, Tensor& out, const RunArgs& a) {
  into_out(in, out);
  AllreduceOptions o;
  o.op = a.op;
  o.timeout = a.timeout;
  b.all_reduce(out, o);
}
void run_broadcast(Backend& b, const Tensor& in, Tensor& out, const RunArgs& a) {
  into_out(in, out);
  BroadcastOptions o;
  o.root = a.root;
  o.timeout = a.timeout;
  b.broadcast(out, o);
}
void run_reduce(Backend& b, const Tensor& in, Tensor& out, const RunArgs& a) {
  into_out(in, out);
  ReduceOptions o;
  o.root = a.root;
  o.op = a.op;
  o.timeout = a.timeout;
  b.reduce(out, o);
}
void run_all_gather(Backend& b, const Tensor& in, Tensor& out, const RunArgs& a) {
  AllgatherOptions o;
  o.timeout = a.timeout;
  b.all_gather(in, out, o);
}
void run_gather(Backend& b, const Tensor& in, Tensor& out, const RunArgs& a) {
  GatherOptions o;
  o.root = a.root;
  o.timeout = a.timeout;
  b.gather(in, out, o);
}
void run_scatter(Backend& b, const Tensor& in, Tensor& out, const RunArgs& a) {
  ScatterOptions o;
  o.root = a.root;
  o.timeout = a.timeout;
  b.scatter(in, out, o);
}
void run_reduce_scatter(Backend& b, const Tensor& in, Tensor& out, const RunArgs& a) {
  ReduceScatterOptions o;
  o.op = a.op;
  o.timeout = a.timeout;
  b.reduce_scatter(in, out, o);
}
void run_all_to_all(Backend& b, const Tensor& in, Tensor& out, const RunArgs& a) {
  AllToAllOptions o;
  o.timeout = a.timeout;
  b.all_to_all(in, out, o);
}
// nccl-tests' sendrecv: every rank sends to the next and receives from the previous.
void run_send_recv(Backend& b, const Tensor& in, Tensor& out, const RunArgs& a) {
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

}  // namespace

const std::vector<Collective>& collectives() {
  static const std::vector<Collective> table = {
      {"all_reduce", Layout::Whole, InPlace::Same, true, false, all_reduce_factor, run_all_reduce, everywhere,
       want_reduced},
      {"all_gather", Layout::Gathers, InPlace::InIsOwnSlot, false, false, ring_factor, run_all_gather, everywhere,
       want_gathered},
      {"reduce_scatter", Layout::Splits, InPlace::OutIsOwnSlot, true, false, ring_factor, run_reduce_scatter,
       everywhere, want_own_block_reduced},
      {"all_to_all", Layout::Exchange, InPlace::Staged, false, false, ring_factor, run_all_to_all, everywhere,
       want_exchanged},
      {"broadcast", Layout::Whole, InPlace::Same, false, true, one, run_broadcast, everywhere, want_roots},
      {"reduce", Layout::Whole, InPlace::Same, true, true, one, run_reduce, on_root, want_reduced},
      {"gather", Layout::Gathers, InPlace::InIsOwnSlot, false, true, ring_factor, run_gather, on_root, want_gathered},
      {"scatter", Layout::Splits, InPlace::OutIsOwnSlot, false, true, ring_factor, run_scatter, everywhere,
       want_own_block_of_roots},
      {"send_recv", Layout::Whole, InPlace::Staged, false, false, one, run_send_recv, everywhere, want_previous},
  };
  return table;
}

const Collective* find_collective(std::string_view name) {
  for (const auto& c : collectives())
    if (name == c.name) return &c;
  return nullptr;
}

std::string collective_names() {
  std::string s;
  for (const auto& c : collectives()) s += (s.empty() ? "" : ", ") + std::string(c.name);
  return s;
}

SizeCount size_count(const Collective& c, int64_t bytes, size_t element_size, int n) {
  const bool split = c.layout != Layout::Whole;
  int64_t count = bytes / int64_t(element_size);
  if (split) count = count / n * n;
  return {count, count * int64_t(element_size)};
}

}  // namespace distrun::bench
