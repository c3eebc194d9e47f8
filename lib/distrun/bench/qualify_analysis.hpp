// The judging half of `distrun-bench qualify`, free of any network: the schedule of rounds of
// disjoint pairs, the reference each measured direction is judged against (an expectation, a
// healthy baseline, or a robust statistic that holds with up to half the nodes bad), which
// directions are slow, which node or link is to blame, which further pairs would settle the
// blame (bisection). Everything here is O(E log E) in the E measured directions, and E is
// n x rounds, so a 4096-node world is judged in milliseconds.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace distrun::bench {

struct NodeId {
  std::string host;
  std::string address;  // namespace hosts share a host name: the address tells them apart
  bool operator==(const NodeId& o) const { return host == o.host && address == o.address; }
  std::string str() const { return address.empty() ? host : host + " (" + address + ")"; }
  std::string key() const { return host + '\n' + address; }
};

/// Why a direction is slow (bits): its median or its tail (the slowest fifth of the exchanges,
/// so an intermittent fault shows) below the bandwidth threshold, or above the latency one.
enum SlowBits : unsigned { SlowBw = 1, SlowBwTail = 2, SlowLat = 4, SlowLatTail = 8 };
std::string slow_reasons(unsigned bits);  // "bw,bw-tail,lat,lat-tail" for the bits set

/// One direction of one pair, measured by its receiver over repeated exchanges.
struct Edge {
  int src = 0, dst = 0;     // node indices: src sends, dst receives
  double bw_gbps = 0;       // bytes / the median transfer time (one way)
  double bw_tail_gbps = 0;  // bytes / the 80th percentile transfer time
  double lat_us = 0;        // small exchange (both ways at once): median
  double lat_tail_us = 0;   //   and 80th percentile
  bool bisect = false;      // measured by the bisection step
  unsigned slow = 0;        // SlowBits, set by judge()
};

/// What a healthy direction looks like: bandwidth (median and tail) and latency (median and tail).
struct Reference {
  double bw_gbps = 0, bw_tail_gbps = 0, lat_us = 0, lat_tail_us = 0;
};

/// A --save-baseline file: the healthy run's reference and its directions, by node name.
struct Baseline {
  Reference ref;
  std::unordered_map<std::string, Reference> edges;  // edge_key(src, dst) -> figures
  static std::string edge_key(const NodeId& src, const NodeId& dst) { return src.key() + '\t' + dst.key(); }
};

/// What the measured directions are judged against.
struct Expectation {
  double min_fraction = 0.5;         // slow below this fraction of the reference bandwidth
  double max_latency_factor = 4;     // slow above this multiple of the reference latency
  std::optional<double> gbps;        // --expect-gbps: the reference bandwidth of every direction
  std::optional<double> latency_us;  // --expect-latency-us
  std::optional<Baseline> baseline;  // a healthy run, direction by direction
};

/// The thresholds in force (see thresholds()).
struct Thresholds {
  double bw_fraction = 0.5;   // slow below this fraction of the reference bandwidth
  double latency_factor = 4;  // slow above this multiple of the reference latency
};

enum class Verdict { Ok, Suspect, SuspectLink, Unmeasured };
const char* verdict_name(Verdict v);  // "ok", "SUSPECT", "link", "unmeasured"

struct NodeVerdict {
  double out_bw_gbps = 0;  // median over the directions it sends
  double in_bw_gbps = 0;   // median over the directions it receives
  double lat_us = 0;       // median over its directions
  int pairs = 0, slow_pairs = 0;
  int slow_out = 0, slow_in = 0;  // slow directions it sends / receives
  Verdict verdict = Verdict::Unmeasured;
};

/// A slow pair blamed on neither of its nodes: each direction's slowness given.
struct Link {
  int a = 0, b = 0;                 // a < b
  unsigned a_to_b = 0, b_to_a = 0;  // SlowBits of each direction
};

struct Judgement {
  Thresholds limits;       // in force (widened by the jitter)
  Reference ref;           // the reference (judge() says where it came from)
  std::string ref_source;  // "bandwidth B, latency L", each "measured", "expected" or "baseline"
  std::vector<NodeVerdict> nodes;
  std::vector<int> suspect_nodes;
  std::vector<Link> suspect_links;
  bool ring_slow = false;  // the ring's busbw below the threshold of the pairs' reference
  bool failed() const { return !suspect_nodes.empty() || !suspect_links.empty() || ring_slow; }
};

/// The thresholds in force: the expectation's, widened by the jitter of the measurements. The
/// jitter is the median over the directions of tail / median (1 when every exchange of a
/// direction takes the same time, as on a quiet network or through a rate limiter; 2 or more
/// on a loaded host, where some exchanges wait for a CPU); the bandwidth fraction is divided
/// by its square and the latency factor multiplied by it, so a quiet cluster is judged at the
/// expectation's 2x and a loaded one only where a fault stands out of its noise.
Thresholds thresholds(const std::vector<Edge>& edges, const Expectation& e);

/// The reference of the measured directions when no expectation or baseline is given. Of the
/// bandwidths: when the directions fall in two groups (split where they separate best) whose
/// medians are further apart than the slow threshold, the faster group's median, else the
/// median of all. The faster group is the healthy one however many nodes are bad (with half
/// the nodes bad, a quarter of the directions are still healthy); with none bad the reference
/// is the typical direction, not a lucky one. Of the latencies: the fastest quartile's bound
/// (one bad node of four touches half the directions; a latency fault of more nodes needs an
/// expectation or a baseline).
Reference measured_reference(const std::vector<Edge>& edges, const Thresholds& t);

/// Marks each direction's SlowBits and blames: nodes in order of their share of slow pairs,
/// a node with at least half its pairs slow and at least two of them not yet explained by an
/// earlier suspect is a suspect; the slow pairs left are links, with their direction.
/// `ring_bw_gbps` (0: none) is judged against the bandwidth reference.
Judgement judge(const std::vector<NodeId>& nodes, std::vector<Edge>& edges, const Expectation& e,
                double ring_bw_gbps = 0);

/// Rounds of disjoint pairs (the circle method): the first `rounds` of the n-1 (even n) or n
/// (odd n) rounds that cover every pair; 0 means default_rounds(n).
std::vector<std::vector<std::pair<int, int>>> pair_rounds(int n, int rounds = 0);
/// ceil(log2 n) + 2, at most every pair: each node meets that many partners, so a bad node
/// stands out against several references while the exchanges grow as n log n.
int default_rounds(int n);

/// The bisection step: each suspect node and each end of a suspect link is paired with up
/// to `references` nodes judged ok that it has not met yet (spread over them, not always the
/// first), packed into rounds of disjoint pairs; judging again with these tells a node from a
/// link and an unlucky node (whose partners were all bad) from a bad one.
/// O(E log E + doubtful nodes x (rounds + references)).
std::vector<std::vector<std::pair<int, int>>> bisection_rounds(const std::vector<Edge>& edges, const Judgement& j,
                                                               int references = 2);

}  // namespace distrun::bench
