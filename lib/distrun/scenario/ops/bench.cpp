#include "distrun/scenario/ops/bench.hpp"

#include <cstdlib>
#include <ostream>

#include "distrun/bench/collectives.hpp"
#include "distrun/bench/report.hpp"
#include "distrun/bench/sweep.hpp"
#include "distrun/core/error.hpp"
#include "distrun/env/world.hpp"
#include "distrun/scenario/load/loader.hpp"
#include "distrun/scenario/ops/ops.hpp"

namespace distrun::scenario {

namespace {

const bench::Collective& entry(Op op) {
  const bench::Collective* c = bench::find_collective(op_name(op));
  if (!c) throw ConfigError(std::string("bench: unsupported collective ") + op_name(op));
  return *c;
}

std::string master_addr() {
  try {
    return world_from_env().master_addr;
  } catch (const Error&) {
    return "127.0.0.1";
  }
}

}  // namespace

int64_t bench_max_bytes() {
  const char* v = std::getenv("DISTRUN_BENCH_MAX_BYTES");
  if (!v || !*v) return 0;
  auto parsed = parse_byte_size(v);
  if (!parsed) throw ConfigError(std::string("DISTRUN_BENCH_MAX_BYTES: bad size '") + v + "'");
  return *parsed;
}

double bus_factor(Op op, int n) { return entry(op).bus_factor(n); }

bool bench_reduces(Op op) { return entry(op).reduces; }

BenchSize bench_size(Op op, int64_t bytes, size_t element_size, int n) {
  const auto sc = bench::size_count(entry(op), bytes, element_size, n);
  return {sc.count, sc.bytes};
}

BenchResult run_bench(Backend& b, const BenchSpec& spec, const BenchContext& ctx) {
  bench::BenchConfig cfg;
  cfg.collective = &entry(spec.collective);
  cfg.dtype = ctx.dtype;
  cfg.op = spec.reduce;
  cfg.root = b.group_rank(spec.root);
  cfg.iters = spec.iters;
  cfg.warmup = spec.warmup;
  cfg.check = ctx.check;
  cfg.average = bench::Average::Max;
  cfg.device = ctx.device;
  const bool native_in_place = cfg.collective->in_place == bench::InPlace::Same;
  cfg.placements[int(bench::Placement::OutOfPlace)] = !native_in_place;
  cfg.placements[int(bench::Placement::InPlace)] = native_in_place;

  const auto ranks = bench::gather_ranks(b, master_addr());
  bench::SweepTotals totals;
  auto emit = [&](const std::string& line) {
    totals.lines.push_back(line);
    if (ctx.out) *ctx.out << line << std::endl;
  };
  const int n = b.size();
  emit("# bench " + std::string(cfg.collective->name) + " on " + std::to_string(n) + " ranks (" + ctx.backend_name +
       ", " + bench::transport_of(b) + "), busbw factor " + std::to_string(cfg.collective->bus_factor(n)).substr(0, 5));
  bench::SweepOutput output;
  output.out = ctx.out;
  output.max_bytes = bench_max_bytes();
  bench::run_sweep(b, cfg, spec.bytes, ranks, output, totals);
  for (const auto& l : bench::footer(totals.avg_busbw(), totals.wrong)) emit(l);

  BenchResult result;
  for (const auto& l : totals.lines) result.table += l + "\n";
  result.wrong = totals.wrong;
  for (const auto& rec : totals.records) {
    nlohmann::ordered_json r;
    r["scenario"] = ctx.scenario;
    r["step"] = ctx.step;
    r["op"] = "bench";
    r["world_size"] = n;
    r["backend"] = ctx.backend_name;
    r.update(rec);
    result.rows.push_back(r.dump());
  }
  return result;
}

}  // namespace distrun::scenario
