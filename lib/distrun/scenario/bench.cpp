#include "distrun/scenario/bench.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <ostream>

#include "distrun/scenario/loader.hpp"
#include "distrun/scenario/local_ops.hpp"
#include "distrun/scenario/reference.hpp"

namespace distrun::scenario {

namespace {

bool splits_buffer(Op op) {
  return op == Op::AllGather || op == Op::ReduceScatter || op == Op::AllToAll || op == Op::Gather || op == Op::Scatter;
}
bool reduces(Op op) { return op == Op::AllReduce || op == Op::Reduce || op == Op::ReduceScatter; }
bool rooted(Op op) { return op == Op::Broadcast || op == Op::Reduce || op == Op::Gather || op == Op::Scatter; }

// The checked iteration's input: small integers, exact in every dtype and in every sum,
// product (at most one factor 2 per element) and bitwise reduction over the ranks.
double pattern(ReduceOp op, int n, int r, int64_t e) {
  if (op == ReduceOp::Prod) return e % n == r ? 2 : 1;
  return double((r + e) % 3 + 1);
}

double reduce_pattern(ReduceOp op, int n, int64_t e, bool integer) {
  double acc = pattern(op, n, 0, e);
  int64_t iacc = int64_t(acc);
  for (int r = 1; r < n; ++r) {
    const double v = pattern(op, n, r, e);
    const int64_t iv = int64_t(v);
    switch (op) {
      case ReduceOp::Prod: acc *= v; break;
      case ReduceOp::Min: acc = std::min(acc, v); break;
      case ReduceOp::Max: acc = std::max(acc, v); break;
      case ReduceOp::BAnd: iacc &= iv; break;
      case ReduceOp::BOr: iacc |= iv; break;
      case ReduceOp::BXor: iacc ^= iv; break;
      default: acc += v; break;
    }
  }
  if (op == ReduceOp::BAnd || op == ReduceOp::BOr || op == ReduceOp::BXor) return double(iacc);
  if (op == ReduceOp::Avg) return integer ? std::trunc(acc / n) : acc / n;
  return acc;
}

Tensor filled(int64_t count, DType dtype, const std::function<double(int64_t)>& f) {
  Tensor t = Tensor::empty({count}, dtype);
  for (int64_t e = 0; e < count; ++e) t.set(e, f(e));
  return t;
}

// Counts elements of `got` (CPU) that differ from `want`; avg of 16-bit floats may differ by
// the last bit (divided in float32, rounded twice); everything else is exact.
int64_t wrong_elements(const Tensor& got, const std::function<double(int64_t)>& want, ReduceOp op) {
  Tensor expect = filled(got.numel(), got.dtype(), want);
  const double tol = op == ReduceOp::Avg ? 2 * dtype_epsilon(got.dtype()) : 0;
  int64_t wrong = 0;
  for (int64_t e = 0; e < got.numel(); ++e) {
    const double g = got.get(e), x = expect.get(e);
    if (!(std::fabs(g - x) <= tol * std::fabs(x))) ++wrong;
  }
  return wrong;
}

Tensor to_cpu(const Tensor& t) { return t.device().is_cuda() ? t.to(Device::cpu()) : t; }

// Buffers for one size, allocated once and reused by every iteration.
struct Buffers {
  Tensor in, out;
};

class BenchRun {
 public:
  BenchRun(Backend& b, const BenchSpec& spec, const BenchContext& ctx, int64_t count)
      : b_(b), spec_(spec), ctx_(ctx), n_(b.size()), me_(b.rank()), count_(count),
        chunk_(splits_buffer(spec.collective) ? count / b.size() : count), root_(b.group_rank(spec.root)) {
    const Op op = spec.collective;
    const int64_t in_count = op == Op::AllGather || op == Op::Gather ? chunk_ : count_;
    const int64_t out_count = op == Op::ReduceScatter || op == Op::Scatter ? chunk_ : count_;
    bufs_.in = Tensor::zeros({in_count}, ctx.dtype, ctx.device);
    // all_reduce, broadcast and reduce work in place: no output buffer to pay for.
    const bool in_place = op == Op::AllReduce || op == Op::Broadcast || op == Op::Reduce;
    if (!in_place) bufs_.out = Tensor::zeros({out_count}, ctx.dtype, ctx.device);
  }

  // One run of the collective on the preallocated buffers.
  void once() {
    switch (spec_.collective) {
      case Op::AllReduce: {
        AllreduceOptions o;
        o.op = spec_.reduce;
        b_.all_reduce(bufs_.in, o);
        break;
      }
      case Op::Broadcast: {
        BroadcastOptions o;
        o.root = root_;
        b_.broadcast(bufs_.in, o);
        break;
      }
      case Op::Reduce: {
        ReduceOptions o;
        o.root = root_;
        o.op = spec_.reduce;
        b_.reduce(bufs_.in, o);
        break;
      }
      case Op::AllGather: b_.all_gather(bufs_.in, bufs_.out, AllgatherOptions{}); break;
      case Op::Gather: {
        GatherOptions o;
        o.root = root_;
        b_.gather(bufs_.in, bufs_.out, o);
        break;
      }
      case Op::Scatter: {
        ScatterOptions o;
        o.root = root_;
        b_.scatter(bufs_.in, bufs_.out, o);
        break;
      }
      case Op::ReduceScatter: {
        ReduceScatterOptions o;
        o.op = spec_.reduce;
        b_.reduce_scatter(bufs_.in, bufs_.out, o);
        break;
      }
      case Op::AllToAll: b_.all_to_all(bufs_.in, bufs_.out, AllToAllOptions{}); break;
      case Op::SendRecv: {
        // nccl-tests' sendrecv: every rank sends to the next and receives from the previous.
        SendOptions o;
        auto s = b_.isend(bufs_.in, (me_ + 1) % n_, o);
        auto r = b_.irecv(bufs_.out, (me_ + n_ - 1) % n_, o);
        s->wait();
        r->wait();
        break;
      }
      default: throw ConfigError(std::string("bench: unsupported collective ") + op_name(spec_.collective));
    }
  }

  // Fills the inputs with the pattern, runs once and counts this rank's wrong elements.
  int64_t checked() {
    const Op op = spec_.collective;
    const ReduceOp rop = spec_.reduce;
    const bool integer = is_integer(ctx_.dtype);
    const int me = me_, n = n_;
    const int64_t chunk = chunk_;
    auto fill_of = [&](int r) { return [=](int64_t e) { return pattern(rop, n, r, e); }; };
    bufs_.in.copy_from(filled(bufs_.in.numel(), ctx_.dtype, fill_of(me)));
    once();
    switch (op) {
      case Op::AllReduce:
        return wrong_elements(to_cpu(bufs_.in), [&](int64_t e) { return reduce_pattern(rop, n, e, integer); }, rop);
      case Op::Reduce:
        if (me != root_) return 0;
        return wrong_elements(to_cpu(bufs_.in), [&](int64_t e) { return reduce_pattern(rop, n, e, integer); }, rop);
      case Op::Broadcast: return wrong_elements(to_cpu(bufs_.in), fill_of(root_), rop);
      case Op::AllGather:
      case Op::Gather:
        if (op == Op::Gather && me != root_) return 0;
        return wrong_elements(to_cpu(bufs_.out), [&](int64_t e) { return pattern(rop, n, int(e / chunk), e % chunk); }, rop);
      case Op::Scatter:
        return wrong_elements(to_cpu(bufs_.out), [&](int64_t e) { return pattern(rop, n, root_, me * chunk + e); }, rop);
      case Op::ReduceScatter:
        return wrong_elements(to_cpu(bufs_.out), [&](int64_t e) { return reduce_pattern(rop, n, me * chunk + e, integer); },
                              rop);
      case Op::AllToAll:
        return wrong_elements(to_cpu(bufs_.out),
                              [&](int64_t e) { return pattern(rop, n, int(e / chunk), me * chunk + e % chunk); }, rop);
      case Op::SendRecv: return wrong_elements(to_cpu(bufs_.out), fill_of((me + n - 1) % n), rop);
      default: return 0;
    }
  }

  // Mean microseconds per run over `iters` runs, after `warmup` untimed ones.
  double timed() {
    for (int i = 0; i < spec_.warmup; ++i) once();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < spec_.iters; ++i) once();
    const auto t1 = std::chrono::steady_clock::now();
    return std::chrono::duration<double, std::micro>(t1 - t0).count() / spec_.iters;
  }

 private:
  Backend& b_;
  const BenchSpec& spec_;
  const BenchContext& ctx_;
  int n_, me_;
  int64_t count_, chunk_;
  int root_;
  Buffers bufs_;
};

}  // namespace

int64_t bench_max_bytes() {
  const char* v = std::getenv("DISTRUN_BENCH_MAX_BYTES");
  if (!v || !*v) return 0;
  auto parsed = parse_byte_size(v);
  if (!parsed) throw ConfigError(std::string("DISTRUN_BENCH_MAX_BYTES: bad size '") + v + "'");
  return *parsed;
}

double bus_factor(Op op, int n) {
  switch (op) {
    case Op::AllReduce: return 2.0 * (n - 1) / n;
    case Op::AllGather:
    case Op::ReduceScatter:
    case Op::AllToAll:
    case Op::Gather:
    case Op::Scatter: return double(n - 1) / n;
    default: return 1.0;
  }
}

BenchSize bench_size(Op op, int64_t bytes, size_t element_size, int n) {
  int64_t count = bytes / int64_t(element_size);
  if (splits_buffer(op)) count = count / n * n;
  if (count <= 0) count = splits_buffer(op) ? n : 1;
  return {count, count * int64_t(element_size)};
}

std::string bench_header() {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%12s  %10s  %8s  %6s  %6s  %9s  %11s  %11s  %6s", "size(B)", "count", "type", "redop",
                "root", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
  return buf;
}

BenchResult run_bench(Backend& b, const BenchSpec& spec, const BenchContext& ctx) {
  BenchResult result;
  const Op op = spec.collective;
  const int n = b.size();
  const std::string redop = reduces(op) ? reduce_op_name(spec.reduce) : "none";
  const int root = rooted(op) ? spec.root : -1;
  auto emit = [&](const std::string& line) {
    result.table += line + "\n";
    if (ctx.out) *ctx.out << line << std::endl;
  };
  emit("# bench " + std::string(op_name(op)) + " on " + std::to_string(n) + " ranks (" + ctx.backend_name +
       "), busbw factor " + std::to_string(bus_factor(op, n)).substr(0, 5));
  emit(bench_header());
  const int64_t cap = bench_max_bytes();
  for (int64_t requested : spec.bytes) {
    if (cap > 0 && requested > cap) {
      emit("# skipped " + std::to_string(requested) + " B: above DISTRUN_BENCH_MAX_BYTES=" + std::to_string(cap));
      continue;
    }
    const BenchSize size = bench_size(op, requested, dtype_size(ctx.dtype), n);
    BenchRun run(b, spec, ctx, size.count);
    int64_t wrong = ctx.check ? run.checked() : 0;
    const double mean_us = run.timed();
    // The slowest rank's mean is the collective's time; wrong elements add up over ranks.
    Tensor t = Tensor::empty({1}, DType::Float64);
    t.data_as<double>()[0] = mean_us;
    Tensor w = Tensor::empty({1}, DType::Int64);
    w.data_as<int64_t>()[0] = wrong;
    Tensor td = t.to(ctx.device), wd = w.to(ctx.device);
    AllreduceOptions max_op;
    max_op.op = ReduceOp::Max;
    b.all_reduce(td, max_op);
    b.all_reduce(wd, AllreduceOptions{});
    const double time_us = to_cpu(td).data_as<double>()[0];
    wrong = to_cpu(wd).data_as<int64_t>()[0];
    result.wrong += wrong;
    const double algbw = time_us > 0 ? double(size.bytes) / 1e9 / (time_us * 1e-6) : 0;
    const double busbw = algbw * bus_factor(op, n);
    char line[200];
    std::snprintf(line, sizeof line, "%12lld  %10lld  %8s  %6s  %6d  %9.2f  %11.3f  %11.3f  %6lld",
                  static_cast<long long>(size.bytes), static_cast<long long>(size.count), dtype_name(ctx.dtype),
                  redop.c_str(), root, time_us, algbw, busbw, static_cast<long long>(wrong));
    emit(line);
    nlohmann::ordered_json r;
    r["scenario"] = ctx.scenario;
    r["step"] = ctx.step;
    r["op"] = "bench";
    r["collective"] = op_name(op);
    r["bytes"] = size.bytes;
    r["count"] = size.count;
    r["dtype"] = dtype_name(ctx.dtype);
    r["reduce"] = redop;
    r["root"] = root;
    r["world_size"] = n;
    r["backend"] = ctx.backend_name;
    r["iters"] = spec.iters;
    r["time_us"] = time_us;
    r["algbw_gbps"] = algbw;
    r["busbw_gbps"] = busbw;
    r["wrong"] = wrong;
    result.rows.push_back(r.dump());
  }
  return result;
}

}  // namespace distrun::scenario
