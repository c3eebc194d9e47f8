// `distrun-bench qualify`: finds the bad node or link of a cluster. One rank per node (or
// every rank with per_device) takes part: a ring send_recv of the whole world for bandwidth
// and latency, then rounds of disjoint pairs (each node meets ceil(log2 n) + 2 partners, all
// pairs exchanging at once, so n log n exchanges in log n rounds), each direction timed by its
// receiver over repeated exchanges; the judge (qualify_analysis) then asks the nodes in doubt
// for a few more pairs against healthy nodes and each link's pair again (bisection), and
// judges again. Each rank holds O(n): the directions are judged a round at a time.
#pragma once
#include <nlohmann/json.hpp>

#include <chrono>
#include <string>
#include <vector>

#include "distrun/backend/backend.hpp"
#include "distrun/bench/engine.hpp"
#include "distrun/bench/qualify_analysis.hpp"

namespace distrun::bench {

struct QualifyConfig {
  int64_t bw_bytes = 4 << 20;  // per exchange, for bandwidth
  int64_t lat_bytes = 8;       // per exchange, for latency
  int iters = 10;
  int warmup = 1;
  bool per_device = false;  // every rank is a "node" (e.g. one per GPU)
  Expectation expect;
  int rounds = 0;                            // rounds of disjoint pairs (0: default_rounds(n))
  int references = 2;                        // healthy partners the bisection gives each node in doubt
  std::chrono::milliseconds timeout{60000};  // per wait
  bool keep_directions = false;              // keep every direction in the result (to write them out)
};

struct QualifyResult {
  std::vector<NodeId> nodes;
  std::vector<int> node_ranks;  // the world rank that speaks for each node
  double ring_bw_gbps = 0;      // bytes / the median iteration (the slowest rank's time)
  double ring_lat_us = 0;
  std::vector<Edge> edges;  // every measured direction, with keep_directions on a node's rank
  int rounds = 0, bisect_rounds = 0;
  Judgement judgement;
  bool failed() const { return judgement.failed(); }
};

/// Runs qualify on the world backend `b` (every rank calls it; ranks that do not speak for a
/// node wait). Every rank returns the same judgement; the directions themselves only where
/// cfg.keep_directions asks (O(n x rounds)); the rest holds O(n) plus the slow directions.
QualifyResult qualify(Backend& b, const std::vector<RankInfo>& ranks, const QualifyConfig& cfg);

/// The printed report: the ring line, a table per node, slow directions, suspects, the hostlist.
std::vector<std::string> qualify_report(const QualifyResult& r, const QualifyConfig& cfg);
/// The -J document's "qualify" part, and a --save-baseline document.
nlohmann::ordered_json qualify_json(const QualifyResult& r, const QualifyConfig& cfg);
nlohmann::ordered_json baseline_json(const QualifyResult& r);
/// Reads a --save-baseline document; ConfigError naming the file when it is not one.
Baseline parse_baseline(const nlohmann::json& j, const std::string& file);

}  // namespace distrun::bench
