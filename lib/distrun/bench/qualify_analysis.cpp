#include "distrun/bench/qualify_analysis.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>

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

const double kLogStep = std::log(1.02);
constexpr double kLowest = 1e-6;

int bin_of(double v) {
  const double b = std::floor(std::log(v / kLowest) / kLogStep);
  return int(std::clamp(b, 0.0, double(DirectionSummary::kBins - 1)));
}

}  // namespace

DirectionSummary::DirectionSummary() : cells_(size_t(kFigures) * 2 * kBins, 0.0) {}

DirectionSummary::DirectionSummary(const std::vector<Edge>& edges) : DirectionSummary() {
  std::map<int, std::vector<Edge>> by_receiver;
  for (const Edge& e : edges) {
    add(e);
    by_receiver[e.dst].push_back(e);
  }
  for (const auto& [node, received] : by_receiver) add_node(received);
}

void DirectionSummary::put(Figure f, double v) {
  if (!(v > 0)) return;
  const int b = bin_of(v);
  cell(f, 0, b) += 1;
  cell(f, 1, b) += v;
}

void DirectionSummary::add_node(const std::vector<Edge>& received) {
  std::vector<double> lat, tail, pair;
  for (const Edge& e : received)
    if (e.lat_us > 0) lat.push_back(e.lat_us), tail.push_back(e.lat_tail_us);
  for (const Edge& e : received)
    if (e.lat_pair_us > 0) pair.push_back(e.lat_pair_us);
  if (!pair.empty()) put(NodeLatPair, median(std::move(pair)));
  if (lat.empty()) return;
  put(NodeLat, median(std::move(lat)));
  put(NodeLatTail, median(std::move(tail)));
}

void DirectionSummary::add(const Edge& e) {
  put(Bw, e.bw_gbps);
  put(BwTail, e.bw_tail_gbps);
  put(Lat, e.lat_us);
  put(LatTail, e.lat_tail_us);
  if (e.bw_tail_gbps > 0) put(BwJitter, e.bw_gbps / e.bw_tail_gbps);
  if (e.lat_med_us > 0) put(LatJitter, e.lat_tail_us / e.lat_med_us);
}

double DirectionSummary::count(Figure f) const {
  double c = 0;
  for (int b = 0; b < kBins; ++b) c += cell(f, 0, b);
  return c;
}

double DirectionSummary::value_at(Figure f, double rank, int first_bin) const {
  double seen = 0;
  for (int b = first_bin; b < kBins; ++b) {
    const double c = cell(f, 0, b);
    if (c > 0 && rank < seen + c) return cell(f, 1, b) / c;
    seen += c;
  }
  return 0;
}

double DirectionSummary::quantile_from(Figure f, double q, int first_bin, double count) const {
  if (count <= 0) return 0;
  const double pos = q / 100.0 * (count - 1);
  const double lo = std::floor(pos), hi = std::min(lo + 1, count - 1);
  const double a = value_at(f, lo, first_bin), b = value_at(f, hi, first_bin);
  return a + (b - a) * (pos - lo);
}

double DirectionSummary::quantile(Figure f, double q) const { return quantile_from(f, q, 0, count(f)); }

double DirectionSummary::upper_mode(Figure f, double ratio) const {
  const double n = count(f);
  if (n <= 0) return 0;
  double total = 0;  // the sum of the logarithms, a bin's values taken at their mean
  for (int b = 0; b < kBins; ++b)
    if (cell(f, 0, b) > 0) total += cell(f, 0, b) * std::log(cell(f, 1, b) / cell(f, 0, b));
  // The best split lies between two non-empty bins: `split` is the upper group's first bin.
  double w0 = 0, s0 = 0, best = 0;
  int split = -1, last = -1, below = -1;
  for (int b = 0; b < kBins; ++b) {
    const double c = cell(f, 0, b);
    if (c <= 0) continue;
    if (last >= 0) {
      const double w1 = n - w0, d = s0 / w0 - (total - s0) / w1;
      if (w0 * w1 * d * d > best) best = w0 * w1 * d * d, split = b, below = last;
    }
    w0 += c;
    s0 += c * std::log(cell(f, 1, b) / c);
    last = b;
  }
  double m = quantile(f, 50);
  if (split >= 0) {
    double lower_count = 0;
    for (int b = 0; b < split; ++b) lower_count += cell(f, 0, b);
    const double lower = quantile_from(f, 50, 0, lower_count);
    const double upper = quantile_from(f, 50, split, n - lower_count);
    const double gap_low = cell(f, 1, below) / cell(f, 0, below), gap_high = cell(f, 1, split) / cell(f, 0, split);
    // Both the groups' medians and the values either side of the split must be `ratio` apart:
    // healthy exchanges on a loaded host spread over a few times with no gap, and their few
    // fastest must not become the reference (a false suspect in 1 of 2 healthy runs here).
    if (upper >= ratio * lower && gap_high >= ratio * gap_low) m = upper;
  }
  return m;
}

Thresholds thresholds(const DirectionSummary& s, const Expectation& e) {
  const double qb = std::max(1.0, s.quantile(DirectionSummary::BwJitter, 50));
  const double ql = std::max(1.0, s.quantile(DirectionSummary::LatJitter, 50));
  return {e.min_fraction / (qb * qb), e.max_latency_factor * ql * ql};
}

Thresholds thresholds(const std::vector<Edge>& edges, const Expectation& e) {
  return thresholds(DirectionSummary(edges), e);
}

Reference measured_reference(const DirectionSummary& s, const Thresholds& t) {
  // Latency is not split: on a loaded host it is bimodal by itself (an exchange either finds
  // both processes running or waits for a CPU); its reference is the typical node's.
  const double bw_ratio = 1 / t.bw_fraction;
  using S = DirectionSummary;
  return {s.upper_mode(S::Bw, bw_ratio), s.upper_mode(S::BwTail, bw_ratio), s.quantile(S::NodeLat, 50),
          s.quantile(S::NodeLatTail, 50), s.quantile(S::NodeLatPair, 50)};
}

Judge::Judge(const std::vector<NodeId>& nodes, const Expectation& e, const DirectionSummary& s, double ring_bw_gbps,
             std::vector<std::pair<int, int>> again)
    : again_(std::move(again)), names_(nodes), expect_(e), logs_(nodes.size()) {
  j_.limits = thresholds(s, e);
  j_.ref = e.baseline ? e.baseline->ref : measured_reference(s, j_.limits);
  std::string bw_from = e.baseline ? "baseline" : "measured", lat_from = bw_from;
  if (e.gbps) {
    j_.ref.bw_gbps = j_.ref.bw_tail_gbps = *e.gbps;
    bw_from = "expected";
  }
  if (e.latency_us) {
    j_.ref.lat_us = j_.ref.lat_tail_us = j_.ref.lat_pair_us = *e.latency_us;
    lat_from = "expected";
  }
  j_.ref_source = "bandwidth " + bw_from + ", latency " + lat_from;
  j_.ring_slow = ring_bw_gbps > 0 && ring_bw_gbps < j_.limits.bw_fraction * j_.ref.bw_gbps;
  j_.nodes.resize(nodes.size());
}

bool Judge::superseded(const Edge& x) const {
  return !x.bisect &&
         std::binary_search(again_.begin(), again_.end(), std::pair{std::min(x.src, x.dst), std::max(x.src, x.dst)});
}

void Judge::mark(Edge& x) const {
  x.slow = x.noisy = 0;
  if (superseded(x)) return;
  const Thresholds& t = j_.limits;
  Reference r = j_.ref;
  const Expectation& e = expect_;
  // Against a baseline: the direction's own healthy figures, but never better than the
  // baseline's reference, so a direction that was lucky once does not make an ordinary
  // result look slow.
  if (e.baseline && !e.gbps && !e.latency_us) {
    const auto it = e.baseline->edges.find(Baseline::edge_key(names_[size_t(x.src)], names_[size_t(x.dst)]));
    if (it != e.baseline->edges.end()) {
      r.bw_gbps = std::min(r.bw_gbps, it->second.bw_gbps);
      r.bw_tail_gbps = std::min(r.bw_tail_gbps, it->second.bw_tail_gbps);
      r.lat_us = std::max(r.lat_us, it->second.lat_us);
      r.lat_tail_us = std::max(r.lat_tail_us, it->second.lat_tail_us);
      r.lat_pair_us = std::max(r.lat_pair_us, it->second.lat_pair_us);
    }
  }
  if (x.bw_gbps < t.bw_fraction * r.bw_gbps) x.slow |= SlowBw;
  if (x.bw_tail_gbps < t.bw_fraction * r.bw_tail_gbps) x.slow |= SlowBwTail;
  if (r.lat_us > 0 && x.lat_us > t.latency_factor * r.lat_us) x.slow |= SlowLat;
  if (r.lat_pair_us > 0 && x.lat_pair_us > t.latency_factor * r.lat_pair_us) x.slow |= SlowLat;
  if (r.lat_tail_us > 0 && x.lat_tail_us > t.latency_factor * r.lat_tail_us) x.slow |= SlowLatTail;
  // Tails alone: noisy, not slow (see Expectation::fail_on_tails).
  if (!(x.slow & kMedianBits) && !e.fail_on_tails) std::swap(x.slow, x.noisy);
}

void Judge::add(std::vector<Edge> batch) {
  batch.erase(std::remove_if(batch.begin(), batch.end(), [&](const Edge& x) { return superseded(x); }), batch.end());
  auto log_of = [](double v) { return std::log(std::max(v, 1e-12)); };
  for (const Edge& x : batch) {
    Logs& from = logs_[size_t(x.src)];
    Logs& to = logs_[size_t(x.dst)];
    from.out += log_of(x.bw_gbps), ++from.outs;
    to.in += log_of(x.bw_gbps), ++to.ins;
    from.lat += log_of(x.lat_us), ++from.lats;
    to.lat += log_of(x.lat_us), ++to.lats;
    if (x.slow) {
      ++j_.nodes[size_t(x.src)].slow_out;
      ++j_.nodes[size_t(x.dst)].slow_in;
      if (j_.slow_count++ < Judgement::kSlowShown) j_.slow_directions.push_back(x);
    }
    if (x.noisy && j_.noisy_count++ < Judgement::kSlowShown) j_.noisy_directions.push_back(x);
  }
  j_.directions += batch.size();
  // Both directions of each pair side by side, folded into one pair.
  auto key = [](const Edge& e) { return std::pair{std::min(e.src, e.dst), std::max(e.src, e.dst)}; };
  std::sort(batch.begin(), batch.end(), [&](const Edge& x, const Edge& y) { return key(x) < key(y); });
  for (size_t i = 0; i < batch.size();) {
    const auto [a, b] = key(batch[i]);
    Link pair{a, b, 0, 0};
    bool noisy = false;
    for (; i < batch.size() && key(batch[i]) == std::pair{a, b}; ++i) {
      (batch[i].src == a ? pair.a_to_b : pair.b_to_a) |= batch[i].slow;
      noisy |= batch[i].noisy != 0;
    }
    const bool slow = (pair.a_to_b | pair.b_to_a) != 0;
    for (int end : {a, b}) {
      ++j_.nodes[size_t(end)].pairs;
      j_.nodes[size_t(end)].slow_pairs += slow;
      j_.nodes[size_t(end)].noisy_pairs += noisy && !slow;
    }
    if (slow) slow_pairs_.push_back(pair);
  }
}

Judgement Judge::finish() {
  Judgement j = std::move(j_);
  const size_t n = j.nodes.size();
  auto mean = [](double sum, int count) { return count ? std::exp(sum / count) : 0.0; };
  for (size_t i = 0; i < n; ++i) {
    auto& v = j.nodes[i];
    v.out_bw_gbps = mean(logs_[i].out, logs_[i].outs);
    v.in_bw_gbps = mean(logs_[i].in, logs_[i].ins);
    v.lat_us = mean(logs_[i].lat, logs_[i].lats);
    if (v.pairs > 0) v.verdict = Verdict::Ok;
  }
  std::sort(slow_pairs_.begin(), slow_pairs_.end(), [](const Link& x, const Link& y) {
    return std::pair{x.a, x.b} < std::pair{y.a, y.b};
  });
  // Each node's slow pairs, as indices into slow_pairs_ (compressed rows: O(n + slow pairs)).
  std::vector<size_t> first(n + 1, 0);
  std::vector<uint32_t> at;
  for (const Link& q : slow_pairs_) ++first[size_t(q.a) + 1], ++first[size_t(q.b) + 1];
  for (size_t i = 0; i < n; ++i) first[i + 1] += first[i];
  at.resize(first[n]);
  std::vector<size_t> fill(first.begin(), first.end() - 1);
  for (size_t p = 0; p < slow_pairs_.size(); ++p)
    for (int end : {slow_pairs_[p].a, slow_pairs_[p].b}) at[fill[size_t(end)]++] = uint32_t(p);
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
    for (size_t k = first[size_t(i)]; k < first[size_t(i) + 1]; ++k) {
      const Link& q = slow_pairs_[at[k]];
      unexplained += j.nodes[size_t(q.a == i ? q.b : q.a)].verdict != Verdict::Suspect;
    }
    // One slow pair cannot tell the node from the link; a node whose every pair is slow is a
    // suspect even when its partners are (a world slow everywhere against an expectation).
    if (unexplained < 2 && !(v.slow_pairs == v.pairs && v.pairs >= 2)) continue;
    v.verdict = Verdict::Suspect;
    j.suspect_nodes.push_back(i);
  }
  std::sort(j.suspect_nodes.begin(), j.suspect_nodes.end());
  for (const Link& q : slow_pairs_) {
    auto& va = j.nodes[size_t(q.a)];
    auto& vb = j.nodes[size_t(q.b)];
    if (va.verdict == Verdict::Suspect || vb.verdict == Verdict::Suspect) continue;
    j.suspect_links.push_back(q);
    va.verdict = vb.verdict = Verdict::SuspectLink;
  }
  // The nodes the blame would name were their noisy pairs slow: a warning.
  for (size_t i = 0; i < n; ++i) {
    const auto& v = j.nodes[i];
    if (v.verdict == Verdict::Ok && v.noisy_pairs >= 2 && 2 * (v.noisy_pairs + v.slow_pairs) >= v.pairs)
      j.noisy_nodes.push_back(int(i));
  }
  return j;
}

Judgement judge(const std::vector<NodeId>& nodes, std::vector<Edge>& edges, const Expectation& e, double ring_bw_gbps,
                std::vector<std::pair<int, int>> again, const std::vector<Edge>* rounds) {
  Judge j(nodes, e, DirectionSummary(rounds ? *rounds : edges), ring_bw_gbps, std::move(again));
  for (Edge& x : edges) j.mark(x);
  j.add(edges);
  return j.finish();
}

std::vector<std::pair<int, int>> link_pairs(const Judgement& j) {
  std::vector<std::pair<int, int>> pairs;
  for (const Link& l : j.suspect_links) pairs.emplace_back(l.a, l.b);
  std::sort(pairs.begin(), pairs.end());
  return pairs;
}

std::vector<std::pair<int, int>> pairs_of(const std::vector<std::vector<std::pair<int, int>>>& rounds) {
  std::vector<std::pair<int, int>> pairs;
  for (const auto& round : rounds) pairs.insert(pairs.end(), round.begin(), round.end());
  std::sort(pairs.begin(), pairs.end());
  pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
  return pairs;
}

int default_rounds(int n) {
  if (n < 2) return 0;
  const int every = n % 2 ? n : n - 1;
  const int log2n = int(std::ceil(std::log2(double(n))));
  return std::min(every, log2n + 2);
}

// Circle method: the last place is fixed and the others turn by one each round, so the node at
// place p (p < m - 1) in round 0 is at (p + r) mod (m - 1) in round r; place i meets place
// m - 1 - i. An odd n gets an empty seat (-1).
Schedule::Schedule(int n, int rounds) : m_(n % 2 ? n + 1 : n) {
  if (rounds <= 0) rounds = default_rounds(n);
  rounds_ = std::max(0, std::min(rounds, m_ - 1));
  seat_.resize(size_t(m_));
  for (int i = 0; i < m_; ++i) seat_[size_t(i)] = i < n ? i : -1;
  uint64_t state = 0x9E3779B97F4A7C15ULL;
  for (int i = n - 1; i > 0; --i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    std::swap(seat_[size_t(i)], seat_[size_t((state >> 33) % uint64_t(i + 1))]);
  }
  place_.resize(size_t(std::max(n, 0)));
  for (int p = 0; p < m_; ++p)
    if (seat_[size_t(p)] >= 0) place_[size_t(seat_[size_t(p)])] = p;
}

int Schedule::at(int round, int place) const {
  if (place == m_ - 1) return seat_[size_t(place)];
  const int turn = m_ - 1;
  return seat_[size_t(((place - round) % turn + turn) % turn)];
}

int Schedule::partner(int round, int node) const {
  const int p = place_[size_t(node)];
  const int now = p == m_ - 1 ? p : (p + round) % (m_ - 1);
  return at(round, m_ - 1 - now);
}

std::vector<std::pair<int, int>> Schedule::pairs(int round) const {
  std::vector<std::pair<int, int>> out;
  for (int i = 0; i < m_ / 2; ++i) {
    const int a = at(round, i), b = at(round, m_ - 1 - i);
    if (a >= 0 && b >= 0) out.emplace_back(std::min(a, b), std::max(a, b));
  }
  return out;
}

std::vector<std::vector<std::pair<int, int>>> pair_rounds(int n, int rounds) {
  const Schedule s(n, rounds);
  std::vector<std::vector<std::pair<int, int>>> out;
  for (int r = 0; r < s.rounds(); ++r) out.push_back(s.pairs(r));
  return out;
}

std::vector<std::vector<std::pair<int, int>>> bisection_rounds(const Schedule& met, const Judgement& j,
                                                               int references) {
  const int nodes = int(j.nodes.size());
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
  std::vector<std::pair<int, int>> plan = link_pairs(j);
  std::set<std::pair<int, int>> planned(plan.begin(), plan.end());
  size_t again_left = size_t(nodes);  // pairs of suspects still to be measured again
  if (!healthy.empty())
    for (int x = 0; x < nodes; ++x) {
      if (!in_doubt(x)) continue;
      std::vector<int> mx;
      for (int r = 0; r < met.rounds(); ++r)
        if (const int p = met.partner(r, x); p >= 0) mx.push_back(p);
      std::sort(mx.begin(), mx.end());
      int have = 0;
      for (int p : mx) have += ok(p);
      // Start at a place of its own among the healthy nodes, so the extra pairs spread.
      const size_t start = size_t(x) * 2654435761u % healthy.size();
      for (size_t k = 0; k < healthy.size() && have < references; ++k) {
        const int h = healthy[(start + k) % healthy.size()];
        const std::pair<int, int> pair{std::min(x, h), std::max(x, h)};
        if (h == x || std::binary_search(mx.begin(), mx.end(), h) || !planned.insert(pair).second) continue;
        plan.push_back(pair);
        ++have;
      }
      // A suspect node has its own pairs of the rounds measured again: on a loaded host a busy
      // stretch can hold up most exchanges of two of a node's few directions at once, or of one
      // beside a slow link of the node's, and the node is named only when the second
      // measurement agrees; a bad node is as slow again. At most n such pairs in all (the
      // suspects in node order), so that many bad nodes cost no more than two rounds' worth.
      if (j.nodes[size_t(x)].verdict == Verdict::Suspect && again_left >= mx.size())
        for (int p : mx)
          if (planned.insert({std::min(x, p), std::max(x, p)}).second) {
            plan.emplace_back(std::min(x, p), std::max(x, p));
            --again_left;
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
