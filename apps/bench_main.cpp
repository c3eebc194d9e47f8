// distrun-bench: nccl-tests' habits (flags, table) over distrun's backends, one rank per
// process, started by distrun, srun or mpirun (the world comes from the environment, as for
// distrun-worker). `distrun-bench qualify` finds a bad node or link. The measuring, the
// statistics and the reports live in the library (distrun/bench/); this file reads options.
#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <iostream>

#include "distrun/bench/control_plane.hpp"
#include "rendezvous/control_plane_load.hpp"
#include "distrun/bench/qualify.hpp"
#include "distrun/bench/report.hpp"
#include "distrun/bench/sweep.hpp"
#include "distrun/bench/vocabulary.hpp"
#include "distrun/comm/process_group.hpp"
#include "distrun/core/error.hpp"
#include "distrun/nccl/device_choice.hpp"
#include "distrun/scenario/load/loader.hpp"
#include "distrun/scenario/output/results_file.hpp"

namespace {

using distrun::ConfigError;
namespace bench = distrun::bench;

int64_t bytes_of(const std::string& flag, const std::string& text) {
  auto v = distrun::scenario::parse_byte_size(text);
  if (!v || *v < 0) throw ConfigError(flag + ": bad size '" + text + "' (e.g. 8, 64K, 128M, 1G)");
  return *v;
}

// nccl-tests' NCCL_TESTS_MIN_BW (GB/s): the run fails when the average bus bandwidth is below
// 90% of it; -1 when unset.
double min_bw_from_env() {
  const char* v = std::getenv("NCCL_TESTS_MIN_BW");
  if (!v || !*v) return -1;
  char* end = nullptr;
  const double x = std::strtod(v, &end);
  if (*end || !(x >= 0)) throw ConfigError(std::string("NCCL_TESTS_MIN_BW: not a bandwidth in GB/s: '") + v + "'");
  return x;
}

struct Common {
  std::string backend = "auto", device = "cpu", json_path, log_level = "warn";
  double timeout_s = 300;
};

void add_common(CLI::App& app, Common& c) {
  app.add_option("--backend", c.backend, "gloo, nccl or auto (nccl with --device cuda)")
      ->check(CLI::IsMember({"gloo", "nccl", "auto"}));
  app.add_option("--device", c.device,
                 "Where the buffers live: cpu or cuda (the rank's GPU, chosen as by the NCCL backend: docs/gpu.md)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("-T,--timeout", c.timeout_s,
                 "Seconds any one collective may take before the run fails (default 300; 0, nccl-tests' none, is 300)");
  app.add_option("-J,--output_file", c.json_path, "Write the results as JSON to FILE (rank 0)");
  app.add_option("--log-level", c.log_level, "trace, debug, info, warn, error, critical or off");
}

// -T 0 is nccl-tests' "no timeout"; distrun never waits without a bound, so it is the default.
std::chrono::milliseconds timeout_of(const Common& c) {
  return std::chrono::milliseconds(int64_t(std::ceil((c.timeout_s > 0 ? c.timeout_s : 300) * 1000)));
}

std::shared_ptr<distrun::ProcessGroup> join(const Common& c) {
  const auto level = spdlog::level::from_str(c.log_level);
  if (level == spdlog::level::off && c.log_level != "off")
    throw ConfigError("--log-level: unknown level '" + c.log_level + "'");
  spdlog::set_level(level);
  if (!(c.timeout_s >= 0)) throw ConfigError("-T: the timeout must be 0 (distrun's default) or more seconds");
  distrun::InitOptions init;
  init.backend = distrun::parse_backend(c.backend == "auto" ? (c.device == "cuda" ? "nccl" : "gloo") : c.backend);
  init.timeout = timeout_of(c);
  return distrun::ProcessGroup::init(init);
}

// Written by rank 0 only; the file is created before the run so a bad path fails first.
std::unique_ptr<distrun::scenario::ResultsFile> open_output(const std::string& path, bool rank0) {
  if (path.empty() || !rank0) return nullptr;
  return std::make_unique<distrun::scenario::ResultsFile>(path);
}

int run_bench(int argc, char** argv) {
  CLI::App
      app{"Times a collective over a range of sizes, as nccl-tests' *_perf programs do, on every rank of a "
          "distrun, srun or mpirun job.",
          "distrun-bench"};
  Common common;
  std::string collective, minb = "32M", maxb = "32M", stepb = "1M", dtype = "float", op = "sum", csv_path;
  double factor = 1;
  int iters = 20, warmup = 1, agg = 1, check = 1, root = 0, average = 1, blocking = 0;
  int out_of_place = -1;  // -O: -1 both placements
  bool verbose = false, raw_samples = false;
  app.add_option("collective", collective,
                 distrun::bench::collective_names() + ", or all (each in turn); `qualify` finds a bad node")
      ->required();
  app.add_option("-b,--minbytes", minb, "Smallest size in bytes (K, M, G: powers of 1024; default 32M)");
  app.add_option("-e,--maxbytes", maxb, "Largest size in bytes (default 32M)");
  app.add_option("-i,--stepbytes", stepb, "Step between sizes when -f is 1 (default 1M)");
  app.add_option("-f,--stepfactor", factor, "Multiply each size by this to get the next (default 1: use -i)");
  app.add_option("-n,--iters", iters, "Timed iterations per size (default 20)");
  app.add_option("-w,--warmup_iters", warmup, "Untimed iterations before them (default 1)");
  app.add_option("-m,--agg_iters", agg, "Collectives per timed iteration, the time divided among them (default 1)");
  app.add_option("-c,--check", check,
                 "N: check N runs' results per size (before the warm-up) and count #wrong "
                 "elements; 0: do not (default 1)");
  app.add_option("-d,--datatype", dtype, "float, half, bfloat16, double, int8, uint8, int32, int64, or all");
  app.add_option("-o,--op", op, "Reduce op: sum, prod, min, max, avg, band, bor, bxor, or all (sum..avg)");
  app.add_option("-r,--root", root,
                 "Root rank of " + distrun::bench::collective_names(true) + "; -1: every rank in turn (default 0)");
  app.add_option("-a,--average", average, "Time reported from the ranks' means: 0 rank 0, 1 average, 2 min, 3 max")
      ->check(CLI::IsMember({0, 1, 2, 3}));
  app.add_option("-z,--blocking", blocking,
                 "distrun's backend calls always complete before returning: 0 and 2 "
                 "time the same; 1 adds a barrier after each run (timed), 3 one after "
                 "each iteration (not timed)")
      ->check(CLI::IsMember({0, 1, 2, 3}));
  // rccl-tests' name and values (nccl-tests always times both).
  app.add_option("-O,--out_of_place", out_of_place,
                 "Time one placement only: 1 out of place, 0 in place; the other's columns read N/A and its -J "
                 "object is null (default: both, out of place first)")
      ->check(CLI::IsMember({0, 1}));
  app.add_flag("--raw-samples", raw_samples,
               "Add every rank's time of every timed iteration to each -J record "
               "(rank_times_us)");
  app.add_option("--csv", csv_path, "Write one line per size and placement as CSV to FILE (rank 0)");
  app.add_flag("-v,--verbose", verbose,
               "Print the statistics of every size under its row: min, p50, p90, p99, max, "
               "mean, cv, the first run and the slowest rank with its host; and the path each group takes");
  add_common(app, common);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  // Everything the command line says is checked before joining the job.
  std::vector<const bench::Collective*> colls;
  if (collective == "all") {
    for (const auto& c : bench::collectives()) colls.push_back(&c);
  } else if (auto* c = bench::find_collective(collective)) {
    colls.push_back(c);
  } else {
    throw ConfigError("unknown collective '" + collective + "' (" + bench::collective_names() + ", all or qualify)");
  }
  std::vector<distrun::DType> types;
  if (dtype == "all")
    types = bench::all_types();
  else if (auto t = bench::parse_type(dtype))
    types.push_back(*t);
  else
    throw ConfigError("-d: unknown type '" + dtype + "' (float, half, bfloat16, double, int8, uint8, int32, int64)");
  std::vector<distrun::ReduceOp> ops;
  if (op == "all")
    ops = bench::all_reduce_ops();
  else if (auto o = distrun::parse_reduce_op(op))
    ops.push_back(*o);
  else
    throw ConfigError("-o: unknown op '" + op + "' (sum, prod, min, max, avg, band, bor, bxor, all)");
  const bool reduces = std::any_of(colls.begin(), colls.end(), [](auto* c) { return c->reduces; });
  if (reduces && ops.size() == 1 && types.size() == 1)
    if (auto why = distrun::reduce_op_refusal(ops[0], types[0])) throw ConfigError("-o " + op + ": " + *why);
  const auto sizes = bench::size_sweep(bytes_of("-b", minb), bytes_of("-e", maxb), factor, bytes_of("-i", stepb));
  if (iters < 0 || warmup < 0 || agg < 1) throw ConfigError("need -n >= 0, -w >= 0 and -m >= 1");
  if (check < 0) throw ConfigError("-c: need 0 (no check) or more checked runs");
  if (root < -1) throw ConfigError("-r: need a rank, or -1 for every rank in turn");
  const double min_bw = min_bw_from_env();
  // -v also shows the path each group takes (logged once per group, at info level).
  if (verbose && common.log_level == "warn") common.log_level = "info";

  auto pg = join(common);
  distrun::Backend& b = pg->backend();
  const bool rank0 = pg->rank() == 0;
  if (root >= b.size())
    throw ConfigError("-r: root " + std::to_string(root) + " is not a rank of this world of " +
                      std::to_string(b.size()));
  std::vector<int> roots{root};
  if (root == -1) {
    roots.clear();
    for (int r = 0; r < b.size(); ++r) roots.push_back(r);
  }
  auto json_file = open_output(common.json_path, rank0);
  auto csv_file = open_output(csv_path, rank0);
  const std::string start_time = bench::local_time_now();
  const auto ranks = bench::gather_ranks(b, pg->world().master_addr);
  std::ostream* out = rank0 ? &std::cout : nullptr;
  const int64_t step_bytes = bytes_of("-i", stepb);
  char step[64];
  if (factor > 1)
    std::snprintf(step, sizeof step, "%g(factor)", factor);
  else
    std::snprintf(step, sizeof step, "%lld(bytes)", static_cast<long long>(step_bytes));
  const bool timed[2] = {out_of_place != 0, out_of_place != 1};  // indexed by bench::Placement
  char settings[400];
  std::snprintf(settings, sizeof settings,
                "distrun-bench %s  minBytes %lld maxBytes %lld step: %s warmup iters: %d iters: %d agg iters: %d "
                "validation: %d blocking: %d average: %d%s",
                collective.c_str(), static_cast<long long>(bytes_of("-b", minb)),
                static_cast<long long>(bytes_of("-e", maxb)), step, warmup, iters, agg, check, blocking, average,
                out_of_place == 0   ? " placement: in-place only"
                : out_of_place == 1 ? " placement: out-of-place only"
                                    : "");
  if (out) {
    for (const auto& l : bench::header_block(settings, ranks)) *out << l << "\n";
    *out << "# backend " << b.name() << ", transport " << bench::transport_of(b) << ", " << b.size() << " ranks\n";
  }
  bench::SweepTotals totals;
  bench::SweepOutput output;
  output.out = out;
  output.verbose = verbose;
  const bench::Collective* last = nullptr;
  for (const auto* c : colls)
    for (auto t : types)
      for (auto o : (c->reduces ? ops : std::vector<distrun::ReduceOp>{ops.front()})) {
        if (auto why = c->reduces ? distrun::reduce_op_refusal(o, t) : std::nullopt) {
          if (out) *out << "# " << c->name << " " << bench::type_name(t) << ": skipped, " << *why << "\n";
          continue;
        }
        for (int rt : (c->rooted ? roots : std::vector<int>{0})) {
          bench::BenchConfig cfg;
          cfg.collective = c;
          cfg.dtype = t;
          cfg.op = o;
          cfg.root = rt;
          cfg.iters = iters;
          cfg.warmup = warmup;
          cfg.agg = agg;
          cfg.check = check;
          cfg.blocking = blocking;
          cfg.average = bench::Average(average);
          std::copy(std::begin(timed), std::end(timed), std::begin(cfg.placements));
          cfg.raw_samples = raw_samples;
          cfg.device =
              common.device != "cuda" ? distrun::Device::cpu()
              : b.tensor_device().is_cuda()
                  ? b.tensor_device()  // NCCL chose it
                  : distrun::Device::cuda(distrun::nccl::cuda_device_for_local_rank(pg->world().local_rank,
                                                                                    pg->world().local_world_size,
                                                                                    /*exclusive=*/false));
          output.column_header = c != last;
          if (out && colls.size() > 1 && c != last) *out << "# " << c->name << "\n";
          last = c;
          bench::run_sweep(b, cfg, sizes, ranks, output, totals);
        }
      }
  if (out)
    for (const auto& l : bench::footer(totals.avg_busbw(), totals.wrong, min_bw)) *out << l << std::endl;
  if (json_file) {
    // nccl-tests' layout (its JSON version 2: version, start_time, args, config, results,
    // out_of_bounds, average_bus_bandwidth, errors, end_time), with distrun's kind, provenance
    // and options beside its keys.
    nlohmann::ordered_json doc, args = nlohmann::ordered_json::array(), devices = nlohmann::ordered_json::array();
    for (int i = 0; i < argc; ++i) args.push_back(argv[i]);
    for (const auto& r : ranks)
      devices.push_back({{"rank", r.rank}, {"group", 0}, {"pid", r.pid}, {"hostname", r.host}, {"device", r.device}});
    // The placements timed, as the rows have them (a row's other placement is null): what ran,
    // not what -O asked for.
    nlohmann::ordered_json placements = nlohmann::ordered_json::array();
    for (auto p : {bench::Placement::OutOfPlace, bench::Placement::InPlace})
      if (std::any_of(totals.rows.begin(), totals.rows.end(),
                      [&](const auto& row) { return !row.at(bench::placement_name(p)).is_null(); }))
        placements.push_back(bench::placement_name(p));
    doc["version"] = 2;
    doc["kind"] = "bench";
    doc["start_time"] = start_time;
    doc["args"] = args;
    doc["config"] = {{"nthreads", 1},
                     {"ngpus", 1},
                     {"minimum_bytes", bytes_of("-b", minb)},
                     {"maximum_bytes", bytes_of("-e", maxb)},
                     {factor > 1 ? "step_factor" : "step_bytes",
                      factor > 1 ? nlohmann::ordered_json(factor) : nlohmann::ordered_json(step_bytes)},
                     {"warmup_iters", warmup},
                     {"iterations", iters},
                     {"aggregated_iterations", agg},
                     {"validation", check},
                     {"graph", 0},
                     {"blocking_collectives", blocking != 0},
                     {"per_iter_timing", true},
                     {"parallel_init", false},
                     {"devices", devices},
                     {"collective", collective},
                     {"datatype", dtype},
                     {"op", op},
                     {"root", root},
                     {"average", average},
                     {"blocking", blocking},
                     {"placements", placements},
                     {"device", common.device}};
    doc["provenance"] = bench::provenance(b, ranks);
    doc["results"] = totals.rows;
    doc["out_of_bounds"] = {{"count", totals.wrong}, {"okay", totals.wrong == 0}};
    doc["average_bus_bandwidth"] = {{"bandwidth", totals.avg_busbw()},
                                    {"okay", min_bw < 0 ? nlohmann::ordered_json("unchecked")
                                                        : nlohmann::ordered_json(
                                                              !bench::below_min_bw(totals.avg_busbw(), min_bw))}};
    doc["errors"] = nlohmann::ordered_json::array();
    doc["end_time"] = bench::local_time_now();
    json_file->commit({doc.dump(2)});
  }
  if (csv_file) csv_file->commit(bench::csv_lines(totals.rows));
  return totals.wrong > 0 || bench::below_min_bw(totals.avg_busbw(), min_bw) ? 1 : 0;
}

int run_qualify(int argc, char** argv) {
  CLI::App
      app{"Finds the bad node or link: a ring test of the whole world, then rounds of disjoint pairs (each node "
          "meets ceil(log2 n) + 2 others), each direction timed over repeated exchanges and judged against an "
          "expectation, a healthy baseline, or the upper mode of the directions measured; the nodes in doubt are "
          "measured again against healthy ones. Exit 1 when any node, link or the ring is slow.",
          "distrun-bench qualify"};
  Common common;
  bench::QualifyConfig cfg;
  std::string bw = "4M", lat = "8", baseline_path, save_path;
  double expect_gbps = 0, expect_lat = 0;
  app.add_option("-b,--bytes", bw, "Bytes each way per exchange, for bandwidth (default 4M)");
  app.add_option("--latency-bytes", lat, "Bytes each way per exchange, for latency (default 8)");
  app.add_option("-n,--iters", cfg.iters, "Timed exchanges per pair and size (default 10)");
  app.add_option("-w,--warmup_iters", cfg.warmup, "Untimed exchanges before them (default 1)");
  app.add_flag("--per-device", cfg.per_device,
               "Every rank is a node (e.g. one rank per GPU); default: one rank per host");
  app.add_option("--min-fraction", cfg.expect.min_fraction,
                 "A direction is slow when its median or tail bandwidth is below this fraction of the reference "
                 "(default 0.5)");
  app.add_option("--max-latency-factor", cfg.expect.max_latency_factor,
                 "A direction is slow when its median or tail latency is above this multiple of the reference (default "
                 "4)");
  app.add_flag("--fail-on-tails", cfg.expect.fail_on_tails,
               "A direction slow by its tail alone (80th percentile; its medians healthy) fails the run too; by "
               "default it is reported as noisy: busy CPUs slow tails (for hosts whose CPUs are known to be idle)");
  app.add_option("--expect-gbps", expect_gbps, "The bandwidth each direction should reach (GB/s): the reference");
  app.add_option("--expect-latency-us", expect_lat,
                 "The latency each small exchange should stay under (us): the reference");
  app.add_option("--baseline", baseline_path, "Judge each direction against an earlier --save-baseline FILE");
  app.add_option("--save-baseline", save_path, "Write this run's directions as a baseline to FILE (rank 0)");
  app.add_option("--rounds", cfg.rounds, "Rounds of disjoint pairs (default 0: ceil(log2 n) + 2, at most every pair)");
  add_common(app, common);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  cfg.bw_bytes = bytes_of("-b", bw);
  cfg.lat_bytes = bytes_of("--latency-bytes", lat);
  if (cfg.bw_bytes < 1 || cfg.lat_bytes < 1) throw ConfigError("qualify: sizes must be at least 1 byte");
  if (cfg.iters < 1 || cfg.warmup < 0) throw ConfigError("qualify: need -n >= 1 and -w >= 0");
  if (cfg.rounds < 0) throw ConfigError("--rounds: must be 0 (the default) or more");
  const auto& e = cfg.expect;
  if (!(e.min_fraction > 0 && e.min_fraction <= 1)) throw ConfigError("--min-fraction: must be in (0, 1]");
  if (!(e.max_latency_factor >= 1)) throw ConfigError("--max-latency-factor: must be 1 or more");
  if (app.count("--expect-gbps")) {
    if (!(expect_gbps > 0)) throw ConfigError("--expect-gbps: must be more than 0");
    cfg.expect.gbps = expect_gbps;
  }
  if (app.count("--expect-latency-us")) {
    if (!(expect_lat > 0)) throw ConfigError("--expect-latency-us: must be more than 0");
    cfg.expect.latency_us = expect_lat;
  }
  if (!baseline_path.empty()) {
    std::ifstream f(baseline_path);
    if (!f) throw ConfigError(baseline_path + ": cannot read the baseline");
    nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
    if (j.is_discarded()) throw ConfigError(baseline_path + ": not JSON");
    cfg.expect.baseline = bench::parse_baseline(j, baseline_path);
  }
  auto pg = join(common);
  cfg.timeout = timeout_of(common);
  distrun::Backend& b = pg->backend();
  const bool rank0 = pg->rank() == 0;
  auto json_file = open_output(common.json_path, rank0);
  auto save_file = open_output(save_path, rank0);
  cfg.keep_directions = json_file || save_file;
  const auto ranks = bench::gather_ranks(b, pg->world().master_addr);
  const auto result = bench::qualify(b, ranks, cfg);
  if (rank0) {
    for (const auto& l : bench::qualify_report(result, cfg)) std::cout << l << "\n";
    std::cout << std::flush;
  }
  if (json_file) {
    nlohmann::ordered_json doc;
    doc["kind"] = "qualify";
    doc["provenance"] = bench::provenance(b, ranks);
    doc["qualify"] = bench::qualify_json(result, cfg);
    json_file->commit({doc.dump(2)});
  }
  if (save_file) save_file->commit({bench::baseline_json(result).dump(2)});
  return result.failed() ? 1 : 0;
}

int run_control_plane(int argc, char** argv) {
  CLI::App
      app{"Loads the control plane: N clients, each speaking the real protocol (authenticated), against a store "
          "server of its own process, through one barrier; prints one JSON line (connect_s, barrier_s, the server's "
          "peak RSS and CPU).",
          "distrun-bench control-plane"};
  bench::ControlPlaneOptions o;
  double timeout_s = 120;
  double interval_s = 0.1, window_s = 7.5;
  app.add_option("--role", o.role,
                 "What is loaded: store (the workers' store) or rendezvous (node 0's agent rendezvous, --clients "
                 "agents: round_s, heartbeat_cpu_pct, failure_fanout_s)")
      ->check(CLI::IsMember({"store", "rendezvous"}));
  app.add_option("--server", o.server, "Whose store server: distrun or torch (c10d's TCPStore, no secret)")
      ->check(CLI::IsMember({"distrun", "torch"}));
  app.add_option("--clients", o.clients, "Clients, each with its own connection (default 1024)");
  app.add_option("--barrier", o.barrier,
                 "counter (each client counts itself in; the last opens a gate all wait on: how ranks join) or keys "
                 "(each waits for every client's key)")
      ->check(CLI::IsMember({"counter", "keys"}));
  app.add_option("--per-address", o.per_address, "Clients per loopback source address 127.1.x.y (default 4096)");
  app.add_option("--in-flight", o.in_flight, "Connections opened and authenticated at once (default 128)");
  app.add_option("--python", o.python, "The Python with torch, for --server torch (default /usr/bin/python3)");
  app.add_option("-T,--timeout", timeout_s, "Seconds the connects, and then the barrier, may take (default 120)");
  app.add_option("--monitor-interval", interval_s,
                 "Rendezvous: seconds between an agent's watches (distrun's --monitor-interval; default 0.1)");
  app.add_option("--heartbeat-window", window_s,
                 "Rendezvous: seconds node 0's CPU is measured while the agents heartbeat (default 7.5: two beat "
                 "periods)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  if (!(timeout_s > 0)) throw ConfigError("-T: a positive number of seconds");
  o.timeout = std::chrono::milliseconds(int64_t(std::ceil(timeout_s * 1000)));
  o.interval = std::chrono::milliseconds(int64_t(std::round(interval_s * 1000)));
  o.heartbeat_window = std::chrono::milliseconds(int64_t(std::round(window_s * 1000)));
  const auto result = o.role == "rendezvous" ? distrun::launcher::run_rendezvous_load(o) : bench::run_control_plane(o);
  std::cout << bench::control_plane_json(result) << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // A peer that died must give EPIPE (an error naming it), not a silent SIGPIPE death.
  std::signal(SIGPIPE, SIG_IGN);
  spdlog::set_default_logger(spdlog::stderr_color_mt("distrun-bench"));
  try {
    if (argc > 1 && std::string(argv[1]) == "qualify") return run_qualify(argc - 1, argv + 1);
    if (argc > 1 && std::string(argv[1]) == "control-plane") return run_control_plane(argc - 1, argv + 1);
    return run_bench(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "distrun-bench: error: " << e.what() << std::endl;
    return distrun::exit_code(e);
  }
}
