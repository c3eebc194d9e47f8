// The judging half of `distrun-bench qualify`, free of any network: from the measured pairs,
// which are slow, which node or link is to blame, which further pairs would settle the
// blame (the bisection step), and the suspects as a SLURM hostlist.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace distrun::bench {

struct NodeId {
  std::string host;
  std::string address;  // namespace hosts share a host name: the address tells them apart
  bool operator==(const NodeId& o) const { return host == o.host && address == o.address; }
  std::string str() const { return address.empty() ? host : host + " (" + address + ")"; }
};

struct PairResult {
  int a = 0, b = 0;      // node indices, a < b
  double bw_gbps = 0;    // per direction, both directions at once
  double lat_us = 0;     // small-message exchange, p50
  std::string phase;     // "pairs" or "bisect"
  double threshold_gbps = 0;
  bool slow = false;
};

/// A --save-baseline file's pairs, matched by the two nodes' names.
struct Baseline {
  struct Pair {
    NodeId a, b;
    double bw_gbps = 0;
    double lat_us = 0;
  };
  std::vector<Pair> pairs;
  double median_bw_gbps = 0;
};

enum class Verdict { Ok, Suspect, SuspectLink, Unmeasured };
const char* verdict_name(Verdict v);  // "ok", "SUSPECT", "link", "unmeasured"

struct NodeVerdict {
  double median_bw_gbps = 0;
  double median_lat_us = 0;
  int pairs = 0, slow_pairs = 0;
  Verdict verdict = Verdict::Unmeasured;
};

struct Judgement {
  std::vector<NodeVerdict> nodes;
  std::vector<int> suspect_nodes;                // node indices
  std::vector<std::pair<int, int>> suspect_links; // node index pairs whose ends are both fine
};

/// Marks each pair slow when below min_fraction of its baseline (capped at the baseline's
/// median) or, without one, of the median over the nodes of each node's median pair, then blames: a node whose every pair is slow is a
/// suspect; a slow pair between two nodes that are not suspects is a suspect link.
Judgement judge(const std::vector<NodeId>& nodes, std::vector<PairResult>& pairs, double min_fraction,
                const std::optional<Baseline>& baseline);

/// The bisection step: every node of a slow pair is measured against up to `references` nodes
/// that are in no slow pair (and not yet measured with it), so that a slow node and a slow
/// link can be told apart when the schedule did not pair everyone. Pairs as (a, b), a < b.
std::vector<std::pair<int, int>> bisection_pairs(int nodes, const std::vector<PairResult>& pairs, int references = 2);

/// Rounds of disjoint pairs covering every pair of `n` nodes (the circle method): n-1 rounds
/// for even n, n for odd n; at most `max_rounds` of them when that is above 0.
std::vector<std::vector<std::pair<int, int>>> pair_rounds(int n, int max_rounds = 0);

/// SLURM's compressed form of `hosts` ("node[01-03,07],login1"), each host once.
std::string compress_hostlist(const std::vector<std::string>& hosts);

}  // namespace distrun::bench
