// `distrun-bench qualify`: finds the bad node or link of a cluster. One rank per node (or
// every rank with per_device) takes part: a ring send_recv of the whole world for bandwidth
// and latency, then pairwise exchanges between nodes (every pair one at a time for small
// worlds, rounds of disjoint pairs at once for large ones), then the bisection step on what
// fell below the threshold; qualify_analysis judges.
#pragma once
#include <nlohmann/json.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "distrun/backend/backend.hpp"
#include "distrun/bench/engine.hpp"
#include "distrun/bench/qualify_analysis.hpp"

namespace distrun::bench {

struct QualifyConfig {
  int64_t bw_bytes = 4 << 20;  // per exchange, for bandwidth
  int64_t lat_bytes = 8;       // per exchange, for latency
  int iters = 5;
  int warmup = 1;
  bool per_device = false;     // every rank is a "node" (e.g. one per GPU)
  double min_fraction = 0.5;
  std::optional<Baseline> baseline;
  int all_pairs_max = 16;      // up to this many nodes: every pair, one at a time
  int max_rounds = 0;          // above it: at most this many rounds of disjoint pairs (0: all)
  std::chrono::milliseconds timeout{60000};  // per exchange
};

struct QualifyResult {
  std::vector<NodeId> nodes;
  std::vector<int> node_ranks;  // the world rank that speaks for each node
  double ring_bw_gbps = 0;
  double ring_lat_us = 0;
  std::vector<PairResult> pairs;
  Judgement judgement;
  bool all_pairs = true;
  bool any_suspect() const { return !judgement.suspect_nodes.empty() || !judgement.suspect_links.empty(); }
};

/// Runs qualify on the world backend `b` (every rank calls it; ranks that do not speak for a
/// node wait). Every rank returns the same result.
QualifyResult qualify(Backend& b, const std::vector<RankInfo>& ranks, const QualifyConfig& cfg);

/// The printed report: the ring line, a table per node, suspects, the hostlist.
std::vector<std::string> qualify_report(const QualifyResult& r);
/// The -J document's "qualify" part, and a --save-baseline document.
nlohmann::ordered_json qualify_json(const QualifyResult& r, const QualifyConfig& cfg);
nlohmann::ordered_json baseline_json(const QualifyResult& r);
/// Reads a --save-baseline document; ConfigError naming the file when it is not one.
Baseline parse_baseline(const nlohmann::json& j, const std::string& file);

}  // namespace distrun::bench
