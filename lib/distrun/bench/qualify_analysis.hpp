// The judging half of `distrun-bench qualify`, free of any network: the schedule of rounds of
// disjoint pairs, the reference each measured direction is judged against (an expectation, a
// healthy baseline, or a robust statistic that holds with up to half the nodes bad), which
// directions are slow, which node or link is to blame, which further pairs would settle the
// blame (bisection). Everything is O(n) memory in the n nodes, plus the slow pairs: the
// schedule is computed per round, the reference comes from fixed-size histograms that ranks sum
// (one all_reduce), and the blame takes the directions a round at a time, keeping per-node
// counts and only the slow pairs. The time is O(E log n) in the E measured directions.
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
/// so an intermittent fault shows) below the bandwidth threshold, or above the latency one
/// (SlowLat: its 20th percentile or its pair's median, see Edge).
enum SlowBits : unsigned { SlowBw = 1, SlowBwTail = 2, SlowLat = 4, SlowLatTail = 8 };
constexpr unsigned kMedianBits = SlowBw | SlowLat;  // not the tails
std::string slow_reasons(unsigned bits);            // "bw,bw-tail,lat,lat-tail" for the bits set

/// One direction of one pair, measured by its receiver over repeated exchanges.
struct Edge {
  int src = 0, dst = 0;     // node indices: src sends, dst receives
  double bw_gbps = 0;       // bytes / the median transfer time (one way)
  double bw_tail_gbps = 0;  // bytes / the 80th percentile transfer time
  double lat_us = 0;        // small exchange (both ways at once): 20th percentile (see qualify.cpp),
  double lat_med_us = 0;    //   median,
  double lat_tail_us = 0;   //   and 80th percentile, as this end (dst) timed them
  // The pair's latency: the median over its small exchanges of the mean of the two ends' times
  // (half the round trip). Each end times an exchange from its own sync, so when one end starts
  // late by L the other end's time holds L and its own lacks it, down to the time of a read:
  // the sum does not move while L is at most the one-way delay d, and holds L - d of a longer
  // one (a busy host's wake-up, a scheduler slice), so such a host's pairs read about L / 2
  // where its partner's end alone read L; a delay of either way adds to it. So a fault that
  // holds up half the exchanges or more (a throttled CPU, a flapping port, retransmits) moves
  // it; wake-ups move it by half, and where every host is loaded alike the reference with it.
  // Both directions of a pair carry it: a one-way latency fault marks the link both ways.
  double lat_pair_us = 0;
  bool bisect = false;  // measured by the bisection step
  unsigned slow = 0;    // SlowBits, set by judge(): the direction counts against its nodes
  unsigned noisy = 0;   // SlowBits of a direction slow by its tails alone (see Expectation)
};

/// What a healthy direction looks like: bandwidth (median and tail) and latency (20th
/// percentile, tail, and the pair's median; 0: not judged).
struct Reference {
  double bw_gbps = 0, bw_tail_gbps = 0, lat_us = 0, lat_tail_us = 0, lat_pair_us = 0;
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
  // A direction whose bandwidth (median) and latency (20th percentile and the pair's median) are
  // healthy and only a tail slow is noisy: reported, not blamed. Busy CPUs hold some exchanges for
  // a scheduler slice (milliseconds where a healthy exchange takes tens of microseconds), and the
  // load stays for as long as it runs: on four namespace hosts beside four busy loops, tails alone
  // named a healthy node in about half the runs, two of its three directions, and the same pairs
  // measured again were slow again, as an intermittent fault's would be. A fault that holds up half
  // the exchanges or more (a rate limiter, a bad cable or port, a throttled CPU) moves a median,
  // which a loaded host's scheduling moves less (the pair's latency by half its wake-ups at most:
  // see Edge::lat_pair_us). fail_on_tails (--fail-on-tails) blames tails too, for hosts whose CPUs
  // are known to be idle.
  bool fail_on_tails = false;
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
  int noisy_pairs = 0;  // pairs with a noisy direction and no slow one
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
  std::vector<Edge> slow_directions;  // the first kSlowShown slow directions, as judged
  size_t slow_count = 0;              // slow directions in all
  // Noisy (slow by tails alone, Expectation::fail_on_tails off): a warning that fails nothing.
  // The nodes that the blame would name from their noisy pairs (at least half of their pairs
  // slow or noisy, two of them noisy); the first kSlowShown noisy directions and their count.
  std::vector<int> noisy_nodes;
  std::vector<Edge> noisy_directions;
  size_t noisy_count = 0;
  size_t directions = 0;  // directions judged
  static constexpr size_t kSlowShown = 64;
  bool ring_slow = false;  // the ring's busbw below the threshold of the pairs' reference
  bool failed() const { return !suspect_nodes.empty() || !suspect_links.empty() || ring_slow; }
};

/// Bandwidths, latencies and their jitters as log-binned histograms (2% bins, each holding the
/// count and the sum of its values, so that values that fall in one bin are known by their mean
/// and equal values exactly): a fixed size whatever the number of directions, and summed across
/// ranks by one all_reduce of cells(), so every rank holds the same distributions.
class DirectionSummary {
 public:
  /// NodeLat, NodeLatTail, NodeLatPair: one value per node, the median over the directions it
  /// received of their latency (20th percentile, tail, pair's median): a node's latency among
  /// its peers, whatever moment each exchange happened to find the host's CPUs in.
  enum Figure { Bw, BwTail, Lat, LatTail, BwJitter, LatJitter, NodeLat, NodeLatTail, NodeLatPair, kFigures };
  static constexpr int kBins = 1512;  // 1.02^1512 spans 1e-6 to 1e7 (GB/s, us, ratios)

  DirectionSummary();
  /// Every direction, and every receiving node's latency.
  explicit DirectionSummary(const std::vector<Edge>& edges);
  void add(const Edge& e);
  /// The node's latency from the directions it received (`received`: one node's, any order).
  void add_node(const std::vector<Edge>& received);
  double count(Figure f) const;
  /// Percentile `q` (0..100), interpolated between ranks as percentile() does (0 when empty).
  double quantile(Figure f, double q) const;
  /// The typical healthy value: the values are split in two where the split separates them
  /// best (Otsu's method on their logarithms); when the faster group's median is at least
  /// `ratio` times the slower group's, with a gap of `ratio` between the groups, the values are
  /// bimodal and the faster group is the healthy one, however many nodes the slower one holds;
  /// otherwise the median of all.
  double upper_mode(Figure f, double ratio) const;
  std::vector<double>& cells() { return cells_; }

 private:
  double& cell(Figure f, int sum, int bin) { return cells_[(size_t(f) * 2 + size_t(sum)) * kBins + size_t(bin)]; }
  double cell(Figure f, int sum, int bin) const { return cells_[(size_t(f) * 2 + size_t(sum)) * kBins + size_t(bin)]; }
  void put(Figure f, double v);                                 // one value into its bin (values <= 0 are not measured)
  double value_at(Figure f, double rank, int first_bin) const;  // the rank-th value from first_bin on
  double quantile_from(Figure f, double q, int first_bin, double count) const;
  std::vector<double> cells_;  // per figure: kBins counts, then kBins sums
};

/// The thresholds in force: the expectation's, widened by the jitter of the measurements. The
/// jitter is the median over the directions of tail / median (bandwidth: median / 80th percentile;
/// latency: 80th percentile / median, as the receiving end timed them) (1 when every exchange of a
/// direction takes the same time, as on a quiet network or through a rate limiter; 2 or more on a
/// loaded host, where some exchanges wait for a CPU); the bandwidth fraction is divided by its
/// square and the latency factor multiplied by it, so a quiet cluster is judged at the
/// expectation's 2x and a loaded one only where a fault stands out of its noise.
Thresholds thresholds(const DirectionSummary& s, const Expectation& e);
Thresholds thresholds(const std::vector<Edge>& edges, const Expectation& e);

/// The reference of the measured directions when no expectation or baseline is given: the
/// upper mode of the bandwidths (the faster group is the healthy one however many nodes are
/// bad: with half the nodes bad, a quarter of the directions are still healthy; with none bad
/// the reference is the typical direction, not a lucky one). Of the latencies: the median of the
/// nodes' latencies (NodeLat), so a node is slow relative to its peers measured in the same run.
/// Busy CPUs delay exchanges at random, by up to a scheduler slice, and a node's median over
/// its partners evens that out, where the fastest directions would be the few lucky ones; a bad
/// node slows every one of its directions but only one of each partner's. It holds while a
/// healthy node meets fewer bad partners than good ones and fewer than half the nodes are bad (one
/// bad node of four); a latency fault of more nodes needs an expectation or a baseline.
Reference measured_reference(const DirectionSummary& s, const Thresholds& t);

/// The judge, fed a round at a time so that it holds O(n) plus the slow pairs: construct it
/// from the summary of every direction to be judged (the reference and thresholds), mark() each
/// direction (slow when a median is, noisy when only a tail is: see Expectation), add() them in
/// batches that hold both directions of each of their pairs (a round of disjoint pairs does),
/// then finish(): nodes in order of their share of slow pairs, a node
/// with at least half its pairs slow and at least two of them not yet explained by an earlier
/// suspect is a suspect; the slow pairs left are links, with their direction. `ring_bw_gbps`
/// (0: none) is judged against the bandwidth reference. `again` (sorted pairs a < b): pairs
/// measured a second time by the bisection, whose first measurement is set aside (neither
/// marked nor counted), so that a pair is a link only when its second measurement is slow too.
/// `nodes` and `e` must outlive it.
class Judge {
 public:
  Judge(const std::vector<NodeId>& nodes, const Expectation& e, const DirectionSummary& s, double ring_bw_gbps = 0,
        std::vector<std::pair<int, int>> again = {});
  void mark(Edge& x) const;
  void add(std::vector<Edge> batch);
  Judgement finish();

 private:
  bool superseded(const Edge& x) const;  // a first measurement of a pair in `again`
  std::vector<std::pair<int, int>> again_;
  struct Logs {  // sums of logarithms, for the geometric means of a node's directions
    double out = 0, in = 0, lat = 0;
    int outs = 0, ins = 0, lats = 0;
  };
  const std::vector<NodeId>& names_;
  const Expectation& expect_;
  Judgement j_;
  std::vector<Logs> logs_;
  std::vector<Link> slow_pairs_;
};

/// The whole judgement of `edges` at once (every direction marked): the Judge fed one batch,
/// against the summary of `rounds` (qualify's: the directions of the rounds, which judge the
/// bisection's too) or, when null, of `edges`.
Judgement judge(const std::vector<NodeId>& nodes, std::vector<Edge>& edges, const Expectation& e,
                double ring_bw_gbps = 0, std::vector<std::pair<int, int>> again = {},
                const std::vector<Edge>* rounds = nullptr);

/// The pairs of a judgement's suspect links (a < b, sorted).
std::vector<std::pair<int, int>> link_pairs(const Judgement& j);
/// Every pair of `rounds` (a < b, sorted, once): what a judge given them as `again` takes from
/// their second measurement alone.
std::vector<std::pair<int, int>> pairs_of(const std::vector<std::vector<std::pair<int, int>>>& rounds);

/// Rounds of disjoint pairs by the circle method, one round at a time from O(n) state: the
/// first `rounds` of the n-1 (even n) or n (odd n) rounds that cover every pair; 0 means
/// default_rounds(n). The nodes take their seats in a fixed pseudo-random order (the same on
/// every rank), so that a pattern in the node numbering (every other node bad, a rack) does not
/// line up with the rounds' pattern.
class Schedule {
 public:
  explicit Schedule(int n, int rounds = 0);
  int rounds() const { return rounds_; }
  /// The node `node` meets in round `round`; -1 when it sits out (odd n).
  int partner(int round, int node) const;
  /// The pairs (a < b) of round `round`.
  std::vector<std::pair<int, int>> pairs(int round) const;

 private:
  int at(int round, int place) const;  // the node at `place` in round `round` (-1: empty seat)
  int m_ = 0, rounds_ = 0;             // m_: places (n, or n + 1 with an empty seat)
  std::vector<int> seat_, place_;      // seat_[p]: the node at place p in round 0; place_[node]: p
};

/// Every round of Schedule(n, rounds) at once (O(n x rounds)).
std::vector<std::vector<std::pair<int, int>>> pair_rounds(int n, int rounds = 0);
/// ceil(log2 n) + 2, at most every pair: each node meets that many partners, so a bad node
/// stands out against several references while the exchanges grow as n log n.
int default_rounds(int n);

/// The bisection step: each suspect link's pair is measured again (a link is named only when
/// that agrees: a median held up by a busy stretch of a loaded host is not a link), each suspect
/// node has its own pairs of the rounds measured again (likewise: two of a node's few
/// directions held up at once do not name it; at most `met.rounds()` pairs a suspect), and each suspect
/// node and each end of a suspect link is paired with up to `references` nodes judged ok that
/// it has not met in `met` (spread over them, not always the first), packed into rounds of
/// disjoint pairs; judging again with these tells a node from a link and an unlucky node (whose
/// partners were all bad) from a bad one. The judge takes every pair of these rounds as its
/// `again` (pairs_of).
/// O(n + doubtful nodes x (rounds + references)) memory.
std::vector<std::vector<std::pair<int, int>>> bisection_rounds(const Schedule& met, const Judgement& j,
                                                               int references = 2);

}  // namespace distrun::bench
