#include "distrun/bench/qualify.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "distrun/bench/statistics.hpp"
#include "distrun/core/error.hpp"

namespace distrun::bench {

namespace {

using Clock = std::chrono::steady_clock;

struct ExchangeTimes {
  double best_us, p50_us;
};

// Both directions at once between this rank and `peer` (group ranks): the fastest and the p50
// time of `iters` exchanges of `bytes`, after `warmup` untimed ones.
ExchangeTimes exchange_us(Backend& g, int peer, int64_t bytes, const QualifyConfig& cfg, int tag) {
  Tensor out = Tensor::zeros({bytes}, DType::UInt8, g.tensor_device());
  Tensor in = Tensor::zeros({bytes}, DType::UInt8, g.tensor_device());
  SendOptions o;
  o.tag = tag;
  o.timeout = cfg.timeout;
  std::vector<double> times;
  for (int i = 0; i < cfg.warmup + std::max(cfg.iters, 1); ++i) {
    const auto t0 = Clock::now();
    auto s = g.isend(out, peer, o);
    auto r = g.irecv(in, peer, o);
    s->wait(cfg.timeout);
    r->wait(cfg.timeout);
    if (i >= cfg.warmup) times.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  return {*std::min_element(times.begin(), times.end()), median(times)};
}

// The measurements of one phase, as flat node x node matrices (this rank fills its row).
struct Matrices {
  int n;
  std::vector<double> bw, lat, bisect;  // bisect: 1 where the pair was measured by the bisection
  explicit Matrices(int nodes) : n(nodes), bw(size_t(n * n)), lat(size_t(n * n)), bisect(size_t(n * n)) {}
  double& at(std::vector<double>& m, int a, int b) { return m[size_t(a * n + b)]; }
};

// Element-wise max over the members of `b` of [ring bw, ring lat, bw..., lat..., bisect...].
void share(Backend& b, Matrices& m, double ring[2], std::chrono::milliseconds timeout) {
  const size_t nn = m.bw.size();
  Tensor t = Tensor::empty({int64_t(2 + 3 * nn)}, DType::Float64);
  double* p = t.data_as<double>();
  p[0] = ring[0];
  p[1] = ring[1];
  std::copy(m.bw.begin(), m.bw.end(), p + 2);
  std::copy(m.lat.begin(), m.lat.end(), p + 2 + nn);
  std::copy(m.bisect.begin(), m.bisect.end(), p + 2 + 2 * nn);
  Tensor d = t.to(b.tensor_device());
  AllreduceOptions o;
  o.op = ReduceOp::Max;
  o.timeout = timeout;
  b.all_reduce(d, o);
  const Tensor c = d.device().is_cuda() ? d.to(Device::cpu()) : d;
  const double* q = c.data_as<double>();
  ring[0] = q[0];
  ring[1] = q[1];
  std::copy(q + 2, q + 2 + nn, m.bw.begin());
  std::copy(q + 2 + nn, q + 2 + 2 * nn, m.lat.begin());
  std::copy(q + 2 + 2 * nn, q + 2 + 3 * nn, m.bisect.begin());
}

std::vector<PairResult> pairs_of(Matrices& m) {
  std::vector<PairResult> pairs;
  for (int a = 0; a < m.n; ++a)
    for (int b = a + 1; b < m.n; ++b) {
      const double ab = m.at(m.bw, a, b), ba = m.at(m.bw, b, a);
      if (ab <= 0 && ba <= 0) continue;
      PairResult p;
      p.a = a;
      p.b = b;
      // Each end timed the same exchanges; the slower view is the pair's.
      p.bw_gbps = ab > 0 && ba > 0 ? std::min(ab, ba) : std::max(ab, ba);
      p.lat_us = std::max(m.at(m.lat, a, b), m.at(m.lat, b, a));
      p.phase = m.at(m.bisect, a, b) > 0 || m.at(m.bisect, b, a) > 0 ? "bisect" : "pairs";
      pairs.push_back(p);
    }
  return pairs;
}

// Runs `rounds` of disjoint pairs on the node group `g`, recording this node's row.
void run_rounds(Backend& g, const std::vector<std::vector<std::pair<int, int>>>& rounds, const QualifyConfig& cfg,
                Matrices& m, bool bisect, int& tag) {
  const int me = g.rank();
  BarrierOptions bo;
  bo.timeout = cfg.timeout;
  for (const auto& round : rounds) {
    ++tag;
    for (const auto& [a, b] : round) {
      if (a != me && b != me) continue;
      const int peer = a == me ? b : a;
      // Bandwidth from the fastest exchange: load elsewhere on a host only slows exchanges
      // down, while a bad node or link caps every one of them. Latency: the p50.
      const double bw_us = exchange_us(g, peer, cfg.bw_bytes, cfg, tag).best_us;
      const double lat_us = exchange_us(g, peer, cfg.lat_bytes, cfg, tag).p50_us;
      m.at(m.bw, me, peer) = bw_us > 0 ? double(cfg.bw_bytes) / 1e3 / bw_us : 0;
      m.at(m.lat, me, peer) = lat_us;
      if (bisect) m.at(m.bisect, me, peer) = 1;
    }
    g.barrier(bo);  // the next round starts on a quiet network
  }
}

std::vector<std::vector<std::pair<int, int>>> one_at_a_time(const std::vector<std::pair<int, int>>& pairs) {
  std::vector<std::vector<std::pair<int, int>>> rounds;
  for (const auto& p : pairs) rounds.push_back({p});
  return rounds;
}

}  // namespace

QualifyResult qualify(Backend& world, const std::vector<RankInfo>& ranks, const QualifyConfig& cfg) {
  QualifyResult res;
  for (const auto& r : ranks) {
    NodeId id{r.host, r.address};
    if (cfg.per_device) id.address += (id.address.empty() ? "" : " ") + std::string("rank ") + std::to_string(r.rank);
    if (std::find(res.nodes.begin(), res.nodes.end(), id) != res.nodes.end()) continue;
    res.nodes.push_back(id);
    res.node_ranks.push_back(r.rank);
  }
  const int n = int(res.nodes.size());
  if (n < 2) throw ConfigError("qualify needs at least two nodes (or --per-device with two ranks); this world has " +
                               std::to_string(n));
  std::shared_ptr<Backend> sub;
  Backend* g = &world;
  if (n != world.size()) {
    sub = world.new_group(res.node_ranks);
    g = sub.get();
  }
  Matrices m(n);
  double ring[2] = {0, 0};
  res.all_pairs = n <= cfg.all_pairs_max;
  if (g) {
    // The ring: send_recv through every node at once, through the same engine as the bench.
    BenchConfig rc;
    rc.collective = find_collective("send_recv");
    rc.dtype = DType::UInt8;
    rc.iters = std::max(cfg.iters, 1);
    rc.warmup = cfg.warmup;
    rc.check = false;
    rc.average = Average::Max;
    rc.placements[int(Placement::InPlace)] = false;
    rc.timeout = cfg.timeout;
    ring[0] = run_size(*g, rc, cfg.bw_bytes).placement[0].busbw_gbps;
    ring[1] = run_size(*g, rc, cfg.lat_bytes).placement[0].stats.p50;

    int tag = 1000;
    std::vector<std::pair<int, int>> every;
    for (int a = 0; a < n; ++a)
      for (int b = a + 1; b < n; ++b) every.emplace_back(a, b);
    run_rounds(*g, res.all_pairs ? one_at_a_time(every) : pair_rounds(n, cfg.max_rounds), cfg, m, false, tag);
    share(*g, m, ring, cfg.timeout);
    // Bisection: split each slow pair and measure its ends against healthy nodes.
    std::vector<PairResult> first = pairs_of(m);
    judge(res.nodes, first, cfg.min_fraction, cfg.baseline);
    const auto plan = bisection_pairs(n, first);
    if (!plan.empty()) {
      run_rounds(*g, one_at_a_time(plan), cfg, m, true, tag);
      share(*g, m, ring, cfg.timeout);
    }
  }
  // Every rank learns the result; ranks that speak for no node wait here for the measurements,
  // a bound of one timeout per exchange the schedule can hold.
  share(world, m, ring, cfg.timeout * (2 * n * n + 8));
  res.ring_bw_gbps = ring[0];
  res.ring_lat_us = ring[1];
  res.pairs = pairs_of(m);
  res.judgement = judge(res.nodes, res.pairs, cfg.min_fraction, cfg.baseline);
  return res;
}

std::vector<std::string> qualify_report(const QualifyResult& r) {
  std::vector<std::string> lines;
  char buf[512];
  int bisected = 0;
  for (const auto& p : r.pairs) bisected += p.phase == "bisect";
  std::snprintf(buf, sizeof buf, "# qualify: %zu nodes; ring send_recv busbw %.3f GB/s, latency p50 %.2f us; %zu pairs (%s), %d from bisection",
                r.nodes.size(), r.ring_bw_gbps, r.ring_lat_us, r.pairs.size(),
                r.all_pairs ? "every pair, one at a time" : "rounds of disjoint pairs", bisected);
  lines.push_back(buf);
  std::snprintf(buf, sizeof buf, "# %5s  %6s  %-20s  %-16s  %12s  %12s  %10s  %s", "node", "rank", "hostname", "address",
                "bw(GB/s)", "lat(us)", "slow/pairs", "verdict");
  lines.push_back(buf);
  for (size_t i = 0; i < r.nodes.size(); ++i) {
    const auto& v = r.judgement.nodes[i];
    const std::string sp = std::to_string(v.slow_pairs) + "/" + std::to_string(v.pairs);
    std::snprintf(buf, sizeof buf, "  %5zu  %6d  %-20s  %-16s  %12.3f  %12.2f  %10s  %s", i, r.node_ranks[i],
                  r.nodes[i].host.c_str(), r.nodes[i].address.c_str(), v.median_bw_gbps, v.median_lat_us, sp.c_str(),
                  verdict_name(v.verdict));
    lines.push_back(buf);
  }
  for (const auto& p : r.pairs) {
    if (!p.slow) continue;
    std::snprintf(buf, sizeof buf, "# slow pair: %s <-> %s: %.4f GB/s, below %.4f GB/s", r.nodes[size_t(p.a)].str().c_str(),
                  r.nodes[size_t(p.b)].str().c_str(), p.bw_gbps, p.threshold_gbps);
    lines.push_back(buf);
  }
  std::vector<std::string> names, hosts;
  for (int s : r.judgement.suspect_nodes) {
    names.push_back(r.nodes[size_t(s)].str());
    hosts.push_back(r.nodes[size_t(s)].host);
  }
  std::string joined;
  for (const auto& s : names) joined += (joined.empty() ? "" : ", ") + s;
  lines.push_back("# suspect nodes: " + (joined.empty() ? "none" : joined));
  joined.clear();
  for (const auto& [a, b] : r.judgement.suspect_links)
    joined += (joined.empty() ? "" : ", ") + r.nodes[size_t(a)].str() + " <-> " + r.nodes[size_t(b)].str();
  lines.push_back("# suspect links: " + (joined.empty() ? "none" : joined));
  lines.push_back("# exclude: " + (hosts.empty() ? std::string("none") : compress_hostlist(hosts)));
  lines.push_back(std::string("# verdict: ") + (r.any_suspect() ? "FAILED" : "OK"));
  return lines;
}

nlohmann::ordered_json qualify_json(const QualifyResult& r, const QualifyConfig& cfg) {
  nlohmann::ordered_json j;
  j["config"] = {{"bw_bytes", cfg.bw_bytes},       {"lat_bytes", cfg.lat_bytes},
                 {"iters", cfg.iters},             {"warmup", cfg.warmup},
                 {"per_device", cfg.per_device},   {"min_fraction", cfg.min_fraction},
                 {"baseline", bool(cfg.baseline)}, {"all_pairs", r.all_pairs}};
  j["ring"] = {{"busbw_gbps", r.ring_bw_gbps}, {"lat_us", r.ring_lat_us}};
  nlohmann::ordered_json nodes = nlohmann::ordered_json::array(), pairs = nlohmann::ordered_json::array();
  for (size_t i = 0; i < r.nodes.size(); ++i) {
    const auto& v = r.judgement.nodes[i];
    nodes.push_back({{"node", i},
                     {"rank", r.node_ranks[i]},
                     {"host", r.nodes[i].host},
                     {"address", r.nodes[i].address},
                     {"median_bw_gbps", v.median_bw_gbps},
                     {"median_lat_us", v.median_lat_us},
                     {"pairs", v.pairs},
                     {"slow_pairs", v.slow_pairs},
                     {"verdict", verdict_name(v.verdict)}});
  }
  for (const auto& p : r.pairs)
    pairs.push_back({{"a", p.a}, {"b", p.b}, {"bw_gbps", p.bw_gbps}, {"lat_us", p.lat_us},
                     {"threshold_gbps", p.threshold_gbps}, {"slow", p.slow}, {"phase", p.phase}});
  j["nodes"] = nodes;
  j["pairs"] = pairs;
  nlohmann::ordered_json sn = nlohmann::ordered_json::array(), sl = nlohmann::ordered_json::array();
  std::vector<std::string> hosts;
  for (int s : r.judgement.suspect_nodes) {
    sn.push_back({{"node", s}, {"host", r.nodes[size_t(s)].host}, {"address", r.nodes[size_t(s)].address}});
    hosts.push_back(r.nodes[size_t(s)].host);
  }
  for (const auto& [a, b] : r.judgement.suspect_links) sl.push_back({a, b});
  j["suspect_nodes"] = sn;
  j["suspect_links"] = sl;
  j["exclude"] = compress_hostlist(hosts);
  return j;
}

nlohmann::ordered_json baseline_json(const QualifyResult& r) {
  nlohmann::ordered_json pairs = nlohmann::ordered_json::array();
  for (const auto& p : r.pairs) {
    const auto& a = r.nodes[size_t(p.a)];
    const auto& b = r.nodes[size_t(p.b)];
    pairs.push_back({{"a", {{"host", a.host}, {"address", a.address}}},
                     {"b", {{"host", b.host}, {"address", b.address}}},
                     {"bw_gbps", p.bw_gbps},
                     {"lat_us", p.lat_us}});
  }
  // The same reference judge() takes without a baseline: the median node's median pair.
  std::vector<double> node_medians;
  for (const auto& v : r.judgement.nodes)
    if (v.pairs > 0) node_medians.push_back(v.median_bw_gbps);
  return {{"kind", "qualify_baseline"}, {"median_bw_gbps", median(node_medians)}, {"pairs", pairs}};
}

Baseline parse_baseline(const nlohmann::json& j, const std::string& file) {
  try {
    if (j.at("kind") != "qualify_baseline") throw ConfigError(file + ": not a qualify baseline (kind is not qualify_baseline)");
    Baseline b;
    b.median_bw_gbps = j.at("median_bw_gbps").get<double>();
    for (const auto& p : j.at("pairs"))
      b.pairs.push_back({{p.at("a").at("host").get<std::string>(), p.at("a").at("address").get<std::string>()},
                         {p.at("b").at("host").get<std::string>(), p.at("b").at("address").get<std::string>()},
                         p.at("bw_gbps").get<double>(),
                         p.at("lat_us").get<double>()});
    return b;
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(file + ": not a qualify baseline: " + e.what());
  }
}

}  // namespace distrun::bench
