#include "distrun/bench/qualify_analysis.hpp"

#include <algorithm>
#include <cctype>
#include <map>
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

namespace {

std::optional<double> baseline_of(const Baseline& base, const NodeId& a, const NodeId& b) {
  for (const auto& p : base.pairs)
    if ((p.a == a && p.b == b) || (p.a == b && p.b == a)) return p.bw_gbps;
  return std::nullopt;
}

}  // namespace

Judgement judge(const std::vector<NodeId>& nodes, std::vector<PairResult>& pairs, double min_fraction,
                const std::optional<Baseline>& baseline) {
  // The reference is the median node's median pair: one bad node makes half the pairs of a
  // four-node world slow, which would drag a plain median of the pairs halfway down, but it
  // moves only its own node's median.
  std::vector<std::vector<double>> per_node(nodes.size());
  for (const auto& p : pairs)
    for (int end : {p.a, p.b}) per_node[size_t(end)].push_back(p.bw_gbps);
  std::vector<double> node_medians;
  for (const auto& v : per_node)
    if (!v.empty()) node_medians.push_back(median(v));
  const double med = median(node_medians);
  for (auto& p : pairs) {
    double ref = med;
    // Against a baseline: the pair's own figure, but never above the baseline's median, so a
    // pair that was lucky once does not make an ordinary result look slow.
    if (baseline)
      ref = std::min(baseline->median_bw_gbps,
                     baseline_of(*baseline, nodes[size_t(p.a)], nodes[size_t(p.b)]).value_or(baseline->median_bw_gbps));
    p.threshold_gbps = min_fraction * ref;
    p.slow = p.bw_gbps < p.threshold_gbps;
  }
  Judgement j;
  j.nodes.resize(nodes.size());
  std::vector<std::vector<double>> bw(nodes.size()), lat(nodes.size());
  for (const auto& p : pairs)
    for (int end : {p.a, p.b}) {
      auto& v = j.nodes[size_t(end)];
      ++v.pairs;
      v.slow_pairs += p.slow;
      bw[size_t(end)].push_back(p.bw_gbps);
      lat[size_t(end)].push_back(p.lat_us);
    }
  for (size_t i = 0; i < nodes.size(); ++i) {
    auto& v = j.nodes[i];
    v.median_bw_gbps = median(bw[i]);
    v.median_lat_us = median(lat[i]);
    if (v.pairs == 0) continue;
    v.verdict = v.slow_pairs == v.pairs ? Verdict::Suspect : Verdict::Ok;
    if (v.verdict == Verdict::Suspect) j.suspect_nodes.push_back(int(i));
  }
  for (const auto& p : pairs) {
    if (!p.slow) continue;
    auto& va = j.nodes[size_t(p.a)];
    auto& vb = j.nodes[size_t(p.b)];
    if (va.verdict == Verdict::Suspect || vb.verdict == Verdict::Suspect) continue;
    j.suspect_links.emplace_back(p.a, p.b);
    va.verdict = vb.verdict = Verdict::SuspectLink;
  }
  return j;
}

std::vector<std::pair<int, int>> bisection_pairs(int nodes, const std::vector<PairResult>& pairs, int references) {
  std::set<int> in_slow;
  std::set<std::pair<int, int>> measured;
  for (const auto& p : pairs) {
    measured.insert({std::min(p.a, p.b), std::max(p.a, p.b)});
    if (p.slow) in_slow.insert({p.a, p.b});
  }
  std::vector<int> healthy;
  for (int i = 0; i < nodes; ++i)
    if (!in_slow.count(i)) healthy.push_back(i);
  std::vector<std::pair<int, int>> plan;
  for (int x : in_slow) {
    int have = 0;
    for (int h : healthy) have += measured.count({std::min(x, h), std::max(x, h)}) ? 1 : 0;
    for (int h : healthy) {
      if (have >= references) break;
      const std::pair<int, int> p{std::min(x, h), std::max(x, h)};
      if (measured.count(p)) continue;
      measured.insert(p);
      plan.push_back(p);
      ++have;
    }
  }
  return plan;
}

std::vector<std::vector<std::pair<int, int>>> pair_rounds(int n, int max_rounds) {
  // Circle method: fix the last seat, rotate the others; an odd n gets an empty seat (-1).
  const int m = n % 2 ? n + 1 : n;
  std::vector<int> seat(static_cast<size_t>(m));
  for (int i = 0; i < m; ++i) seat[size_t(i)] = i < n ? i : -1;
  std::vector<std::vector<std::pair<int, int>>> rounds;
  for (int r = 0; r < m - 1; ++r) {
    if (max_rounds > 0 && int(rounds.size()) >= max_rounds) break;
    std::vector<std::pair<int, int>> round;
    for (int i = 0; i < m / 2; ++i) {
      const int a = seat[size_t(i)], b = seat[size_t(m - 1 - i)];
      if (a >= 0 && b >= 0) round.emplace_back(std::min(a, b), std::max(a, b));
    }
    rounds.push_back(round);
    std::rotate(seat.begin(), seat.begin() + (m - 2), seat.begin() + (m - 1));
  }
  return rounds;
}

std::string compress_hostlist(const std::vector<std::string>& hosts) {
  // prefix -> {digit width -> numbers}; hosts without a numeric tail stand alone.
  std::map<std::string, std::map<size_t, std::set<long long>>> numbered;
  std::set<std::string> plain;
  for (const auto& h : hosts) {
    size_t k = h.size();
    while (k > 0 && std::isdigit(static_cast<unsigned char>(h[k - 1]))) --k;
    if (k == h.size() || h.size() - k > 18) {
      plain.insert(h);
      continue;
    }
    const std::string digits = h.substr(k);
    numbered[h.substr(0, k)][digits[0] == '0' ? digits.size() : 0].insert(std::stoll(digits));
  }
  std::vector<std::string> parts;
  for (const auto& [prefix, by_width] : numbered)
    for (const auto& [width, nums] : by_width) {
      auto pad = [w = width](long long v) {
        std::string s = std::to_string(v);
        return s.size() < w ? std::string(w - s.size(), '0') + s : s;
      };
      if (nums.size() == 1) {
        parts.push_back(prefix + pad(*nums.begin()));
        continue;
      }
      std::string ranges;
      for (auto it = nums.begin(); it != nums.end();) {
        long long lo = *it, hi = lo;
        while (++it != nums.end() && *it == hi + 1) ++hi;
        ranges += (ranges.empty() ? "" : ",") + pad(lo) + (hi > lo ? "-" + pad(hi) : "");
      }
      parts.push_back(prefix + "[" + ranges + "]");
    }
  for (const auto& h : plain) parts.push_back(h);
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : ",") + p;
  return out;
}

}  // namespace distrun::bench
