// The measuring engine of distrun-bench and of the scenario `bench` step: for one collective
// and one size, a checked run (#wrong), warm-up, then timed iterations of `agg` runs each
// (launched back to back and timed on the device's clock where the backend can, as nccl-tests
// does), out of place and in place; every rank's per-iteration times are gathered: an iteration
// takes the slowest rank's time (nccl-tests' -I), and the straggler is named by its arrival.
#pragma once
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "distrun/backend/backend.hpp"
#include "distrun/bench/collectives.hpp"
#include "distrun/bench/statistics.hpp"

namespace distrun::bench {

/// How one time per size is made from the ranks' mean times (nccl-tests' -a).
enum class Average { RankZero = 0, Mean = 1, Min = 2, Max = 3 };

enum class Placement { OutOfPlace = 0, InPlace = 1 };
const char* placement_name(Placement p);  // "out_of_place", "in_place"

/// Who each rank is, gathered once and used to name the slowest rank.
struct RankInfo {
  int rank = 0;
  std::string host;     // hostname
  std::string address;  // the address this rank reaches the others from
  int pid = 0;
  std::string device;  // "cpu" or "cuda:N"
};
/// Every member's RankInfo, in group-rank order (every member calls it).
std::vector<RankInfo> gather_ranks(Backend& b, const std::string& master_addr);

struct BenchConfig {
  const Collective* collective = nullptr;
  DType dtype = DType::Float32;
  ReduceOp op = ReduceOp::Sum;
  int root = 0;    // a rank of the backend's group
  int iters = 20;  // -n
  int warmup = 1;  // -w
  int agg = 1;     // -m: runs per timed iteration
  int check = 1;   // -c: checked runs before the warm-up (0: none)
  // -z: 0 and 2 time the same (the timed iterations run back to back: Backend::begin_timed);
  // 1 adds a barrier after each run (timed; the host waits in it), 3 one after each iteration
  // (not timed).
  int blocking = 0;
  Average average = Average::Mean;       // -a
  bool placements[2] = {true, true};     // out of place, in place
  std::chrono::milliseconds timeout{0};  // per run; 0: the backend's
  std::optional<Device> device;          // where the buffers live; default: the backend's
  bool raw_samples = false;              // keep every rank's time of every iteration
  // The host of each rank (any numbering): ranks of one host share a clock, so only hosts'
  // clocks are lined up. Empty: every rank on a clock of its own.
  std::vector<int> host_of_rank;
};

/// One placement's measurements for one size; every rank holds the same values.
struct PlacementResult {
  bool measured = false;
  double time_us = 0;  // per run, combined across ranks as BenchConfig::average says
  double algbw_gbps = 0;
  double busbw_gbps = 0;
  bool checked = false;
  int64_t wrong = 0;    // wrong elements over all ranks
  Summary stats;        // per-run time of each timed iteration: the slowest rank's
  double first_us = 0;  // the very first run of this size (the slowest rank's), cold
  // The straggler, by arrival: each rank notes when it entered each iteration, on its host's
  // clock (hosts' clocks lined up by the ends of a few barriers). In each iteration the last to
  // arrive kept everyone waiting for as long as it came after the last but one; the straggler
  // is the rank that did so for longest in all. Held up before a call it arrives late at it;
  // held up inside one, everyone waits with it there (and wakes up late alike). Its own time
  // alone tells little (held up inside a call it takes as long as everyone; before, it waits
  // least), nor does a pooled percentile (the ranks that waited least pull it down).
  int slowest_rank = 0;
  double slowest_late_us = 0;  // per iteration on average, how long it alone kept the others waiting
  double slowest_share = 0;    // the share of the iterations in which it waited least inside
  // With BenchConfig::raw_samples, [rank][iteration]: each time, and each arrival (on rank 0's
  // clock, from rank 0's first).
  std::vector<std::vector<double>> raw_us, raw_arrival_us;
};

struct SizeResult {
  int64_t bytes = 0;
  int64_t count = 0;           // elements of the whole buffer
  int64_t count_per_rank = 0;  // nccl-tests' count column: each rank's part (or the whole)
  PlacementResult placement[2];
};

/// Measures `config` at `bytes` (rounded as size_count() says) on `b`; every member calls it.
SizeResult run_size(Backend& b, const BenchConfig& config, int64_t bytes);

/// The test-only corruption hook: when DISTRUN_BENCH_TEST_CORRUPT names this rank, its
/// checked result gets one element changed, so tests can see #wrong catch a broken collective.
int corrupt_rank_from_env();

}  // namespace distrun::bench
