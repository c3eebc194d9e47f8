#include "distrun/bench/qualify_analysis.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "distrun/bench/statistics.hpp"

namespace distrun::bench {

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::Ok: return "ok";
    case Verdict::Suspect: return "SUSPECT";
    case Verdict::SuspectLink: return "link";
    case Verdict::Unmeasured: return "unmeasured";
  }
  return "?";
}

std::string slow_reasons(unsigned bits) {
  std::string s;
  for (auto [bit, name] :
       {std::pair{SlowBw, "bw"}, {SlowBwTail, "bw-tail"}, {SlowLat, "lat"}, {SlowLatTail, "lat-tail"}})
    if (bits & bit) s += (s.empty() ? "" : ",") + std::string(name);
  return s;
}

namespace {

// The typical healthy value of a bandwidth. The values are split in two where the split
// separates them best (Otsu's method on their logarithms); when the faster group's median is at
// least `ratio` times the slower group's, with a gap of `ratio` between the groups, the values
// are bimodal and the faster group is the healthy one, however many nodes the slower one
// holds; otherwise the median of all.
double upper_mode(std::vector<double> v, double ratio) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return !(x > 0); }), v.end());
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  std::vector<double> prefix(v.size() + 1, 0.0);  // sums of the logarithms
  for (size_t i = 0; i < v.size(); ++i) prefix[i + 1] = prefix[i] + std::log(v[i]);
  const double total = prefix.back(), n = double(v.size());
  size_t split = 0;
  double best = 0;
  for (size_t k = 1; k < v.size(); ++k) {
    const double w0 = double(k), w1 = n - w0;
    const double d = prefix[k] / w0 - (total - prefix[k]) / w1;
    if (w0 * w1 * d * d > best) best = w0 * w1 * d * d, split = k;
  }
  double m = median(v);
  if (split > 0) {
    const double lower = median(std::vector<double>(v.begin(), v.begin() + std::ptrdiff_t(split)));
    const double upper = median(std::vector<double>(v.begin() + std::ptrdiff_t(split), v.end()));
    // Both the groups' medians and the values either side of the split must be `ratio` apart:
    // healthy exchanges on a loaded host spread over a few times with no gap, and their few
    // fastest must not become the reference (a false suspect in 1 of 2 healthy runs here).
    if (upper >= ratio * lower && v[split] >= ratio * v[split - 1]) m = upper;
  }
  return m;
}

struct Pair {
  int a, b;                 // a < b
  unsigned a_to_b, b_to_a;  // SlowBits
  bool slow() const { return (a_to_b | b_to_a) != 0; }
};

// The measured directions folded into pairs (both directions of a pair together).
std::vector<Pair> pairs_of(const std::vector<Edge>& edges) {
  std::vector<size_t> order(edges.size());
  std::iota(order.begin(), order.end(), size_t{0});
  auto key = [&](size_t i) {
    const Edge& e = edges[i];
    return std::pair{std::min(e.src, e.dst), std::max(e.src, e.dst)};
  };
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return key(x) < key(y); });
  std::vector<Pair> pairs;
  for (size_t i : order) {
    const auto [a, b] = key(i);
    if (pairs.empty() || pairs.back().a != a || pairs.back().b != b) pairs.push_back({a, b, 0, 0});
    (edges[i].src == a ? pairs.back().a_to_b : pairs.back().b_to_a) |= edges[i].slow;
  }
  return pairs;
}

}  // namespace

Thresholds thresholds(const std::vector<Edge>& edges, const Expectation& e) {
  std::vector<double> bw_jitter, lat_jitter;
  for (const Edge& x : edges) {
    if (x.bw_tail_gbps > 0) bw_jitter.push_back(x.bw_gbps / x.bw_tail_gbps);
    if (x.lat_us > 0) lat_jitter.push_back(x.lat_tail_us / x.lat_us);
  }
  const double qb = std::max(1.0, median(bw_jitter)), ql = std::max(1.0, median(lat_jitter));
  return {e.min_fraction / (qb * qb), e.max_latency_factor * ql * ql};
}

Reference measured_reference(const std::vector<Edge>& edges, const Thresholds& t) {
  std::vector<double> bw, bw_tail, lat, lat_tail;
  for (const Edge& x : edges) {
    bw.push_back(x.bw_gbps);
    bw_tail.push_back(x.bw_tail_gbps);
    lat.push_back(x.lat_us);
    lat_tail.push_back(x.lat_tail_us);
  }
  // Latency is not split: on a loaded host it is bimodal by itself (an exchange either finds
  // both processes running or waits for a CPU); its reference is the fastest quartile.
  const double bw_ratio = 1 / t.bw_fraction;
  auto quartile = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : percentile(v, 25);
  };
  return {upper_mode(bw, bw_ratio), upper_mode(bw_tail, bw_ratio), quartile(lat), quartile(lat_tail)};
}

Judgement judge(const std::vector<NodeId>& nodes, std::vector<Edge>& edges, const Expectation& e, double ring_bw_gbps) {
  Judgement j;
  j.limits = thresholds(edges, e);
  const Thresholds& t = j.limits;
  j.ref = e.baseline ? e.baseline->ref : measured_reference(edges, t);
  std::string bw_from = e.baseline ? "baseline" : "measured", lat_from = bw_from;
  if (e.gbps) {
    j.ref.bw_gbps = j.ref.bw_tail_gbps = *e.gbps;
    bw_from = "expected";
  }
  if (e.latency_us) {
    j.ref.lat_us = j.ref.lat_tail_us = *e.latency_us;
    lat_from = "expected";
  }
  j.ref_source = "bandwidth " + bw_from + ", latency " + lat_from;
  for (Edge& x : edges) {
    Reference r = j.ref;
    // Against a baseline: the direction's own healthy figures, but never better than the
    // baseline's reference, so a direction that was lucky once does not make an ordinary
    // result look slow.
    if (e.baseline && !e.gbps && !e.latency_us) {
      const auto it = e.baseline->edges.find(Baseline::edge_key(nodes[size_t(x.src)], nodes[size_t(x.dst)]));
      if (it != e.baseline->edges.end()) {
        r.bw_gbps = std::min(r.bw_gbps, it->second.bw_gbps);
        r.bw_tail_gbps = std::min(r.bw_tail_gbps, it->second.bw_tail_gbps);
        r.lat_us = std::max(r.lat_us, it->second.lat_us);
        r.lat_tail_us = std::max(r.lat_tail_us, it->second.lat_tail_us);
      }
    }
    x.slow = 0;
    if (x.bw_gbps < t.bw_fraction * r.bw_gbps) x.slow |= SlowBw;
    if (x.bw_tail_gbps < t.bw_fraction * r.bw_tail_gbps) x.slow |= SlowBwTail;
    if (r.lat_us > 0 && x.lat_us > t.latency_factor * r.lat_us) x.slow |= SlowLat;
    if (r.lat_tail_us > 0 && x.lat_tail_us > t.latency_factor * r.lat_tail_us) x.slow |= SlowLatTail;
  }
  j.ring_slow = ring_bw_gbps > 0 && ring_bw_gbps < t.bw_fraction * j.ref.bw_gbps;

  const size_t n = nodes.size();
  j.nodes.resize(n);
  std::vector<std::vector<double>> out_bw(n), in_bw(n), lat(n);
  for (const Edge& x : edges) {
    out_bw[size_t(x.src)].push_back(x.bw_gbps);
    in_bw[size_t(x.dst)].push_back(x.bw_gbps);
    lat[size_t(x.src)].push_back(x.lat_us);
    lat[size_t(x.dst)].push_back(x.lat_us);
    if (x.slow) {
      ++j.nodes[size_t(x.src)].slow_out;
      ++j.nodes[size_t(x.dst)].slow_in;
    }
  }
  const std::vector<Pair> pairs = pairs_of(edges);
  std::vector<std::vector<int>> adjacent(n);  // pair indices of each node
  for (size_t p = 0; p < pairs.size(); ++p)
    for (int end : {pairs[p].a, pairs[p].b}) {
      adjacent[size_t(end)].push_back(int(p));
      ++j.nodes[size_t(end)].pairs;
      j.nodes[size_t(end)].slow_pairs += pairs[p].slow();
    }
  for (size_t i = 0; i < n; ++i) {
    auto& v = j.nodes[i];
    v.out_bw_gbps = median(out_bw[i]);
    v.in_bw_gbps = median(in_bw[i]);
    v.lat_us = median(lat[i]);
    if (v.pairs > 0) v.verdict = Verdict::Ok;
  }
  // Blame: the nodes with the largest share of slow pairs first, so that two bad nodes of four
  // explain the slow pairs of the two good ones (each slow with both bad nodes) before those
  // are considered.
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  auto share = [&](int i) {
    const auto& v = j.nodes[size_t(i)];
    return v.pairs ? double(v.slow_pairs) / v.pairs : 0.0;
  };
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) {
    if (share(x) != share(y)) return share(x) > share(y);
    return j.nodes[size_t(x)].slow_pairs > j.nodes[size_t(y)].slow_pairs;
  });
  for (int i : order) {
    auto& v = j.nodes[size_t(i)];
    if (v.slow_pairs == 0 || 2 * v.slow_pairs < v.pairs) continue;
    int unexplained = 0;
    for (int p : adjacent[size_t(i)]) {
      const Pair& q = pairs[size_t(p)];
      const int other = q.a == i ? q.b : q.a;
      unexplained += q.slow() && j.nodes[size_t(other)].verdict != Verdict::Suspect;
    }
    // One slow pair cannot tell the node from the link; a node whose every pair is slow is a
    // suspect even when its partners are (a world slow everywhere against an expectation).
    if (unexplained < 2 && !(v.slow_pairs == v.pairs && v.pairs >= 2)) continue;
    v.verdict = Verdict::Suspect;
    j.suspect_nodes.push_back(i);
  }
  std::sort(j.suspect_nodes.begin(), j.suspect_nodes.end());
  for (const Pair& q : pairs) {
    if (!q.slow()) continue;
    auto& va = j.nodes[size_t(q.a)];
    auto& vb = j.nodes[size_t(q.b)];
    if (va.verdict == Verdict::Suspect || vb.verdict == Verdict::Suspect) continue;
    j.suspect_links.push_back({q.a, q.b, q.a_to_b, q.b_to_a});
    va.verdict = vb.verdict = Verdict::SuspectLink;
  }
  return j;
}

int default_rounds(int n) {
  if (n < 2) return 0;
  const int every = n % 2 ? n : n - 1;
  const int log2n = int(std::ceil(std::log2(double(n))));
  return std::min(every, log2n + 2);
}

std::vector<std::vector<std::pair<int, int>>> pair_rounds(int n, int rounds) {
  if (rounds <= 0) rounds = default_rounds(n);
  // Circle method: fix the last seat, rotate the others; an odd n gets an empty seat (-1).
  // The nodes take their seats in a fixed pseudo-random order (the same on every rank), so
  // that a pattern in the node numbering (every other node bad, a rack) does not line up with
  // the rounds' pattern (the first rounds pair each node with one of the other parity).
  const int m = n % 2 ? n + 1 : n;
  std::vector<int> seat(static_cast<size_t>(m));
  for (int i = 0; i < m; ++i) seat[size_t(i)] = i < n ? i : -1;
  uint64_t state = 0x9E3779B97F4A7C15ULL;
  for (int i = n - 1; i > 0; --i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    std::swap(seat[size_t(i)], seat[size_t((state >> 33) % uint64_t(i + 1))]);
  }
  std::vector<std::vector<std::pair<int, int>>> out;
  for (int r = 0; r < m - 1 && int(out.size()) < rounds; ++r) {
    std::vector<std::pair<int, int>> round;
    for (int i = 0; i < m / 2; ++i) {
      const int a = seat[size_t(i)], b = seat[size_t(m - 1 - i)];
      if (a >= 0 && b >= 0) round.emplace_back(std::min(a, b), std::max(a, b));
    }
    out.push_back(round);
    std::rotate(seat.begin(), seat.begin() + (m - 2), seat.begin() + (m - 1));
  }
  return out;
}

std::vector<std::vector<std::pair<int, int>>> bisection_rounds(const std::vector<Edge>& edges, const Judgement& j,
                                                               int references) {
  const int nodes = int(j.nodes.size());
  std::vector<std::vector<int>> met(static_cast<size_t>(nodes));
  for (const Edge& e : edges) met[size_t(e.dst)].push_back(e.src), met[size_t(e.src)].push_back(e.dst);
  for (auto& m : met) {
    std::sort(m.begin(), m.end());
    m.erase(std::unique(m.begin(), m.end()), m.end());
  }
  auto ok = [&](int i) { return j.nodes[size_t(i)].verdict == Verdict::Ok; };
  auto in_doubt = [&](int i) {
    const Verdict v = j.nodes[size_t(i)].verdict;
    return v == Verdict::Suspect || v == Verdict::SuspectLink;
  };
  std::vector<int> healthy;
  for (int i = 0; i < nodes; ++i)
    if (ok(i)) healthy.push_back(i);
  // With every node in doubt (few rounds, a bad node's pair and a pair that a busy moment
  // slowed), the nodes in doubt meet each other instead: the bad node is slow with each.
  if (healthy.empty())
    for (int i = 0; i < nodes; ++i)
      if (in_doubt(i)) healthy.push_back(i);
  std::vector<std::pair<int, int>> plan;
  if (!healthy.empty())
    for (int x = 0; x < nodes; ++x) {
      if (!in_doubt(x)) continue;
      const auto& mx = met[size_t(x)];
      int have = 0;
      for (int p : mx) have += ok(p);
      // Start at a place of its own among the healthy nodes, so the extra pairs spread.
      const size_t start = size_t(x) * 2654435761u % healthy.size();
      for (size_t k = 0; k < healthy.size() && have < references; ++k) {
        const int h = healthy[(start + k) % healthy.size()];
        const std::pair<int, int> pair{std::min(x, h), std::max(x, h)};
        if (h == x || std::binary_search(mx.begin(), mx.end(), h) ||
            std::find(plan.begin(), plan.end(), pair) != plan.end())
          continue;
        plan.push_back(pair);
        ++have;
      }
    }
  // Rounds of disjoint pairs: each pair in the first round after both its nodes' last one.
  std::vector<int> next(static_cast<size_t>(nodes), 0);
  std::vector<std::vector<std::pair<int, int>>> rounds;
  for (const auto& [a, b] : plan) {
    const int r = std::max(next[size_t(a)], next[size_t(b)]);
    if (size_t(r) >= rounds.size()) rounds.resize(size_t(r) + 1);
    rounds[size_t(r)].emplace_back(a, b);
    next[size_t(a)] = next[size_t(b)] = r + 1;
  }
  return rounds;
}

}  // namespace distrun::bench
