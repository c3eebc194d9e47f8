#include "distrun/bench/engine.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>

#include "distrun/comm/collectives.hpp"
#include "distrun/core/error.hpp"
#include "distrun/env/netif.hpp"

namespace distrun::bench {

namespace {

using Clock = std::chrono::steady_clock;

double micros_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

Tensor to_cpu(const Tensor& t) { return t.device().is_cuda() ? t.to(Device::cpu()) : t; }

// Avg divides in the dtype (16-bit floats round twice, through float32); every other result
// of the fill pattern is a small integer, exact in every dtype.
double tolerance(ReduceOp op, DType t) {
  if (op != ReduceOp::Avg) return 0;
  return t == DType::Float16 || t == DType::BFloat16 ? 1e-2 : 1e-6;
}

struct Buffers {
  Tensor in, out;
  Tensor aside;  // InPlace::Staged: where the input is copied before each run
};

// One run of `c`; a staged in-place run copies its input aside first.
void run_once(const Collective& c, Backend& b, Buffers& buf, const RunArgs& a) {
  if (buf.aside.defined()) {
    buf.aside.copy_from(buf.in);
    c.run(b, buf.aside, buf.out, a);
    return;
  }
  c.run(b, buf.in, buf.out, a);
}

Buffers make_buffers(const Collective& c, Placement p, int64_t count, int64_t block, int me, DType dtype,
                     Device device) {
  Buffers b;
  if (p == Placement::OutOfPlace) {
    b.in = Tensor::zeros({c.layout == Layout::Gathers ? block : count}, dtype, device);
    b.out = Tensor::zeros({c.layout == Layout::Splits ? block : count}, dtype, device);
    return b;
  }
  switch (c.in_place) {
    case InPlace::Same: b.in = b.out = Tensor::zeros({count}, dtype, device); break;
    case InPlace::Staged:
      b.out = Tensor::zeros({count}, dtype, device);
      b.in = b.out;
      b.aside = Tensor::zeros({count}, dtype, device);
      break;
    case InPlace::InIsOwnSlot:
      b.out = Tensor::zeros({count}, dtype, device);
      b.in = b.out.slice(0, me * block, block);
      break;
    case InPlace::OutIsOwnSlot:
      b.in = Tensor::zeros({count}, dtype, device);
      b.out = b.in.slice(0, me * block, block);
      break;
    case InPlace::None: break;
  }
  return b;
}

bool supported(const Collective& c, Placement p) { return p == Placement::OutOfPlace || c.in_place != InPlace::None; }

// Wrong elements of this rank's result of the checked run.
int64_t count_wrong(const Collective& c, const Tensor& out, const RunArgs& a, DType dtype, bool corrupt) {
  if (!c.has_result(a)) return 0;
  Tensor got = to_cpu(out).clone();
  if (corrupt && got.numel() > 0) got.set(0, got.get(0) + 1);
  const bool integer = is_integer(dtype);
  const double tol = tolerance(a.op, dtype);
  Tensor want = Tensor::empty({got.numel()}, dtype);
  for (int64_t e = 0; e < got.numel(); ++e) want.set(e, c.expected(a, e, integer));
  int64_t wrong = 0;
  for (int64_t e = 0; e < got.numel(); ++e) {
    const double g = got.get(e), x = want.get(e);
    if (!(std::fabs(g - x) <= tol * std::fabs(x))) ++wrong;
  }
  return wrong;
}

double combine(const std::vector<double>& per_rank, Average how) {
  switch (how) {
    case Average::RankZero: return per_rank.front();
    case Average::Min: return *std::min_element(per_rank.begin(), per_rank.end());
    case Average::Max: return *std::max_element(per_rank.begin(), per_rank.end());
    case Average::Mean: break;
  }
  double s = 0;
  for (double x : per_rank) s += x;
  return s / double(per_rank.size());
}

// Times of this rank for one placement: the first (cold, checked) run and each iteration's
// time per run; wrong elements of the checked run.
struct LocalTimes {
  std::vector<double> samples;  // [first, iteration 1, ..., iteration iters]
  std::vector<double> entered;  // when each iteration began, on this rank's clock (us)
  std::vector<double> synced;   // when each of kClockSyncs barriers ended, on this rank's clock
  int64_t wrong = 0;
};

// Barriers whose ends line the hosts' clocks up: every rank leaves a barrier at about the same
// moment, so the difference of the ends is the difference of the clocks. Ranks of one host
// read one clock: theirs is never estimated (a straggler leaves barriers late too, and would
// hide in its own estimate).
constexpr int kClockSyncs = 5;

double clock_us() { return std::chrono::duration<double, std::micro>(Clock::now().time_since_epoch()).count(); }

LocalTimes measure(Backend& b, const BenchConfig& cfg, Placement p, int64_t count, int64_t block) {
  const Collective& c = *cfg.collective;
  const int me = b.rank();
  RunArgs a{cfg.op, cfg.root, me, b.size(), block, cfg.timeout};
  Buffers buf = make_buffers(c, p, count, block, me, cfg.dtype, cfg.device.value_or(b.tensor_device()));
  LocalTimes t;
  // The checked runs (the first of them, cold, is timed too): each from a fresh fill, since a
  // run in place overwrote the input.
  Tensor fill;
  if (cfg.check > 0) {
    fill = Tensor::empty({buf.in.numel()}, cfg.dtype);
    for (int64_t e = 0; e < fill.numel(); ++e) fill.set(e, fill_value(cfg.op, b.size(), me, e));
  }
  const bool corrupt = corrupt_rank_from_env() == b.global_rank(me);
  for (int k = 0; k < std::max(cfg.check, 1); ++k) {
    if (cfg.check > 0) buf.in.copy_from(fill);
    const auto t0 = Clock::now();
    run_once(c, b, buf, a);
    if (k == 0) t.samples.push_back(micros_since(t0));
    if (cfg.check > 0) t.wrong += count_wrong(c, buf.out, a, cfg.dtype, corrupt);
  }
  for (int i = 0; i < cfg.warmup; ++i) run_once(c, b, buf, a);
  BarrierOptions bo;
  bo.timeout = cfg.timeout;
  for (int i = 0; i < kClockSyncs; ++i) {
    b.barrier(bo);
    t.synced.push_back(clock_us());
  }
  // No reallocation (and page faults) while timing.
  t.samples.reserve(size_t(cfg.iters) + 1);
  t.entered.reserve(size_t(cfg.iters));
  // Timed as nccl-tests times: launched back to back, the device's clock marking each
  // iteration where the backend has one (Backend::begin_timed), one wait at the end.
  b.begin_timed();
  for (int i = 0; i < cfg.iters; ++i) {
    t.entered.push_back(clock_us());
    b.mark();
    for (int k = 0; k < cfg.agg; ++k) {
      run_once(c, b, buf, a);
      if (cfg.blocking == 1) b.barrier(bo);
    }
    b.mark();
    if (cfg.blocking == 3) b.barrier(bo);
  }
  const std::vector<double> marks = b.end_timed(cfg.timeout * (int64_t(cfg.iters) * cfg.agg + 2 * int64_t(cfg.iters)));
  for (size_t i = 0; i + 1 < marks.size(); i += 2) t.samples.push_back((marks[i + 1] - marks[i]) / cfg.agg);
  return t;
}

PlacementResult summarize_ranks(Backend& b, const BenchConfig& cfg, const LocalTimes& mine, int64_t bytes) {
  const int n = b.size();
  const size_t per = mine.samples.size();
  const size_t row = per + mine.entered.size() + kClockSyncs;
  // Every rank's samples, arrivals and clock, and the wrong elements summed, on every rank.
  Tensor local = Tensor::empty({int64_t(row)}, DType::Float64);
  double* out = std::copy(mine.samples.begin(), mine.samples.end(), local.data_as<double>());
  out = std::copy(mine.entered.begin(), mine.entered.end(), out);
  std::copy(mine.synced.begin(), mine.synced.end(), out);
  Tensor all = Tensor::empty({int64_t(row) * n}, DType::Float64, b.tensor_device());
  AllgatherOptions go;
  go.timeout = cfg.timeout;
  b.all_gather(local.to(b.tensor_device()), all, go);
  const Tensor all_cpu = to_cpu(all);
  Tensor wrong = Tensor::empty({1}, DType::Int64);
  wrong.data_as<int64_t>()[0] = mine.wrong;
  Tensor wrong_dev = wrong.to(b.tensor_device());
  AllreduceOptions ro;
  ro.timeout = cfg.timeout;
  b.all_reduce(wrong_dev, ro);

  PlacementResult r;
  r.measured = true;
  r.checked = cfg.check > 0;
  r.wrong = to_cpu(wrong_dev).data_as<int64_t>()[0];
  const double* v = all_cpu.data_as<double>();
  auto at = [&](int k, size_t i) { return v[size_t(k) * row + i]; };
  const size_t iters = mine.entered.size();
  auto entered = [&](int k, size_t i) { return at(k, per + i); };
  // Each host's clock against rank 0's: per barrier, the earliest of the host's ranks to
  // leave it (the one least held up; a straggler leaves late), against rank 0's host's
  // earliest; the median over the barriers.
  auto host = [&](int k) { return size_t(k) < cfg.host_of_rank.size() ? cfg.host_of_rank[size_t(k)] : -1 - k; };
  std::map<int, std::vector<double>> earliest;  // host -> per barrier
  for (int k = 0; k < n; ++k) {
    auto& e = earliest.try_emplace(host(k), size_t(kClockSyncs), INFINITY).first->second;
    for (size_t j = 0; j < size_t(kClockSyncs); ++j) e[j] = std::min(e[j], at(k, per + iters + j));
  }
  std::map<int, double> host_offset;
  for (const auto& [h, e] : earliest) {
    std::vector<double> d;
    for (size_t j = 0; j < size_t(kClockSyncs); ++j) d.push_back(e[j] - earliest.at(host(0))[j]);
    host_offset[h] = h == host(0) ? 0 : median(d);
  }
  std::vector<double> offset(static_cast<size_t>(n));
  for (int k = 0; k < n; ++k) offset[size_t(k)] = host_offset[host(k)];
  // Iteration i of every rank is the same collective call; -n 0 leaves the first run alone.
  const size_t from = per > 1 ? 1 : 0;
  std::vector<double> iteration, means(size_t(n), 0.0), late(size_t(n), 0.0), least(size_t(n), 0.0);
  for (int k = 0; k < n; ++k) r.first_us = std::max(r.first_us, at(k, 0));
  for (size_t i = from; i < per; ++i) {
    double slowest = 0;
    int shortest = 0;
    for (int k = 0; k < n; ++k) {
      slowest = std::max(slowest, at(k, i));
      means[size_t(k)] += at(k, i);
      if (at(k, i) < at(shortest, i)) shortest = k;
    }
    iteration.push_back(slowest);
    least[size_t(shortest)] += 1;
  }
  // Arrivals on rank 0's clock: the last to enter an iteration alone kept the others waiting
  // for as long as it came after the last but one. (After a long wait inside a call, the ranks
  // that waited are all slow to wake up: none of them stands out of the others.)
  for (size_t i = 0; i < iters && n > 1; ++i) {
    int last = 0;
    for (int k = 1; k < n; ++k)
      if (entered(k, i) - offset[size_t(k)] > entered(last, i) - offset[size_t(last)]) last = k;
    double before = -INFINITY;
    for (int k = 0; k < n; ++k)
      if (k != last) before = std::max(before, entered(k, i) - offset[size_t(k)]);
    late[size_t(last)] += entered(last, i) - offset[size_t(last)] - before;
  }
  const double count = double(per - from);
  auto before = [&](int x, int y) {
    return late[size_t(x)] != late[size_t(y)] ? late[size_t(x)] > late[size_t(y)] : least[size_t(x)] > least[size_t(y)];
  };
  for (int k = 0; k < n; ++k) {
    means[size_t(k)] /= count;
    least[size_t(k)] /= count;
    if (iters > 0) late[size_t(k)] /= double(iters);
  }
  for (int k = 0; k < n; ++k) {
    if (before(k, r.slowest_rank)) r.slowest_rank = k;
    if (!cfg.raw_samples) continue;
    r.raw_us.emplace_back(v + size_t(k) * row + from, v + size_t(k) * row + per);
    r.raw_arrival_us.emplace_back();
    for (size_t i = 0; i < iters; ++i)
      r.raw_arrival_us.back().push_back(entered(k, i) - offset[size_t(k)] - entered(0, 0));
  }
  r.slowest_late_us = late[size_t(r.slowest_rank)];
  r.slowest_share = least[size_t(r.slowest_rank)];
  r.stats = summarize(iteration);
  r.time_us = combine(means, cfg.average);
  r.algbw_gbps = r.time_us > 0 ? double(bytes) / 1e3 / r.time_us : 0;  // bytes/us/1e3 = GB/s
  r.busbw_gbps = r.algbw_gbps * cfg.collective->bus_factor(n);
  return r;
}

}  // namespace

const char* placement_name(Placement p) { return p == Placement::InPlace ? "in_place" : "out_of_place"; }

int corrupt_rank_from_env() {
  const char* v = std::getenv("DISTRUN_BENCH_TEST_CORRUPT");
  if (!v || !*v) return -1;
  char* end = nullptr;
  const long r = std::strtol(v, &end, 10);
  return *end ? -1 : int(r);
}

std::vector<RankInfo> gather_ranks(Backend& b, const std::string& master_addr) {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::string address;
  try {
    address = b.size() > 1 ? local_address_towards(master_addr) : "127.0.0.1";
  } catch (const Error&) {
    address = "";  // not routable: the host name alone names this rank
  }
  nlohmann::ordered_json me{{"host", host},
                            {"address", address},
                            {"pid", int(getpid())},
                            {"device", b.tensor_device().str()}};
  std::vector<RankInfo> ranks;
  int k = 0;
  for (const auto& j : all_gather_object(b, me))
    ranks.push_back({k++, j.at("host").get<std::string>(), j.at("address").get<std::string>(), j.at("pid").get<int>(),
                     j.at("device").get<std::string>()});
  return ranks;
}

SizeResult run_size(Backend& b, const BenchConfig& cfg, int64_t bytes) {
  if (!cfg.collective) throw ConfigError("bench: no collective");
  if (cfg.iters < 0 || cfg.warmup < 0 || cfg.agg < 1) throw ConfigError("bench: need -n >= 0, -w >= 0 and -m >= 1");
  const Collective& c = *cfg.collective;
  const int n = b.size();
  const SizeCount sc = size_count(c, bytes, dtype_size(cfg.dtype), n);
  const int64_t block = c.layout == Layout::Whole ? sc.count : sc.count / n;
  SizeResult res;
  res.bytes = sc.bytes;
  res.count = sc.count;
  res.count_per_rank = block;
  for (Placement p : {Placement::OutOfPlace, Placement::InPlace}) {
    if (!cfg.placements[int(p)] || !supported(c, p)) continue;
    const LocalTimes mine = measure(b, cfg, p, sc.count, block);
    res.placement[int(p)] = summarize_ranks(b, cfg, mine, sc.bytes);
  }
  return res;
}

}  // namespace distrun::bench
