#include "distrun/bench/qualify.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "distrun/bench/statistics.hpp"
#include "distrun/core/error.hpp"
#include "distrun/env/hostlist.hpp"

namespace distrun::bench {

namespace {

using Clock = std::chrono::steady_clock;

Tensor from_device(const Tensor& t) { return t.device().is_cuda() ? t.to(Device::cpu()) : t; }

double us_since(Clock::time_point t0) { return std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); }

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return percentile(v, q);
}

// The tail: the 80th percentile exchange, so that a fault hitting a fifth of the exchanges
// shows while one preempted exchange on a loaded host does not.
constexpr double kTail = 80;
// The latency: the 20th percentile exchange. Each timed exchange starts when this end's sync
// completes, and the partner, blocked in its own wait, must still be woken: on a busy host
// that wake-up is a scheduler slice, milliseconds against tens of microseconds for the small
// exchange itself, and it falls on most exchanges of the end that synced last (beside four
// busy loops, medians of 0.5-1.5 ms where the reference was 30 us, measured again as slow).
// A latency fault that delays every exchange delays the fastest fifth too; the pair's median
// half round trip (Edge::lat_pair_us, which a late start moves by half of what it exceeds the
// one-way delay by, at most) is there for what holds up half the exchanges or more, the tail
// for what holds up fewer.
constexpr double kLatency = 20;
// A step waits at most this many times (sync, go and bulk, sync, go and bulk, sync, small exchange).
constexpr int kWaitsPerExchange = 8;

struct Exchange {
  Tensor out, in;
};

// The buffers of every exchange, one set per node: the steps run one after another.
struct Buffers {
  Exchange tick, bulk, small;
};

Buffers buffers(Backend& g, const QualifyConfig& cfg) {
  const Device dev = g.tensor_device();
  auto pair = [&](int64_t bytes) {
    return Exchange{Tensor::zeros({bytes}, DType::UInt8, dev), Tensor::zeros({bytes}, DType::UInt8, dev)};
  };
  return {pair(1), pair(cfg.bw_bytes), pair(cfg.lat_bytes)};
}

// One partner's (or the ring's) times of each timed exchange.
struct Partner {
  int peer = -1, from = -1;  // send to peer, receive from `from` (the same but in the ring)
  int tag = 0;
  std::vector<double> recv_us, lat_us;
  std::vector<double> partner_lat_us;  // the partner's lat_us, exchange by exchange (a pair's)
};

// Sends to p.peer and receives from p.from at once: the time until the receive completed
// (the direction from -> me) and until both did.
std::pair<double, double> exchange(Backend& g, Exchange& x, const Partner& p, const SendOptions& o) {
  const auto t0 = Clock::now();
  auto s = g.isend(x.out, p.peer, o);
  auto r = g.irecv(x.in, p.from, o);
  r->wait(o.timeout);
  const double recv_us = us_since(t0);
  s->wait(o.timeout);
  return {recv_us, us_since(t0)};
}

// A one-way transfer of the bulk, timed by its reader. The reader posts its receive and only
// then tells the writer to go, so no byte can wait for a receive in a socket's buffer (a path
// whose sends do not wait for the receiver, as distrun's sockets, would otherwise time the copy
// out of the buffer, not the link): the time is the go's one small message and the transfer.
void send_bulk(Backend& g, Buffers& buf, int to, const SendOptions& o) {
  g.irecv(buf.tick.in, to, o)->wait(o.timeout);
  g.isend(buf.bulk.out, to, o)->wait(o.timeout);
}

double receive_bulk(Backend& g, Buffers& buf, int from, const SendOptions& o) {
  auto r = g.irecv(buf.bulk.in, from, o);
  const auto t0 = Clock::now();
  g.isend(buf.tick.out, from, o)->wait(o.timeout);
  r->wait(o.timeout);
  return us_since(t0);
}

// One step with `p`: the bulk transfer and a small exchange, each right after a one-byte
// exchange so both ends start together (the receive time is then the transfer's, not the
// other end's lateness). A pair's bulk goes one way at a time, the lower node first: sent both
// ways at once, a direction slowed by a rate limiter also slows the other, whose TCP
// acknowledgements queue behind its data. The ring's goes both ways at once, as a collective's.
void step(Backend& g, Buffers& buf, Partner& p, const QualifyConfig& cfg, bool timed) {
  SendOptions o;
  o.tag = p.tag;
  o.timeout = cfg.timeout;
  exchange(g, buf.tick, p, o);
  double bw = 0;
  if (p.peer != p.from) {
    bw = exchange(g, buf.bulk, p, o).first;
  } else {
    const bool first = g.rank() < p.peer;
    if (first)
      send_bulk(g, buf, p.peer, o);
    else
      bw = receive_bulk(g, buf, p.peer, o);
    exchange(g, buf.tick, p, o);
    if (first)
      bw = receive_bulk(g, buf, p.peer, o);
    else
      send_bulk(g, buf, p.peer, o);
  }
  exchange(g, buf.tick, p, o);
  const double lat = exchange(g, buf.small, p, o).second;
  if (!timed) return;
  p.recv_us.push_back(bw);
  p.lat_us.push_back(lat);
}

Edge edge_of(const Partner& p, int me, const QualifyConfig& cfg) {
  Edge e;
  e.src = p.from;
  e.dst = me;
  const double gb = double(cfg.bw_bytes) / 1e3;  // bytes/us/1e3 = GB/s
  e.bw_gbps = gb / quantile(p.recv_us, 50);
  e.bw_tail_gbps = gb / quantile(p.recv_us, kTail);
  e.lat_us = quantile(p.lat_us, kLatency);
  e.lat_med_us = quantile(p.lat_us, 50);
  e.lat_tail_us = quantile(p.lat_us, kTail);
  e.lat_pair_us = e.lat_med_us;
  if (p.partner_lat_us.size() == p.lat_us.size() && !p.lat_us.empty()) {
    std::vector<double> half_trip;
    for (size_t i = 0; i < p.lat_us.size(); ++i) half_trip.push_back((p.lat_us[i] + p.partner_lat_us[i]) / 2);
    e.lat_pair_us = quantile(half_trip, 50);
  }
  return e;
}

// The two ends of each pair (the first `pairs` partners) swap their small exchanges' times
// (Edge::lat_pair_us): one message of `-n` doubles each way, a round at a time as the steps are.
void swap_latencies(Backend& g, std::vector<Partner>& partners, size_t pairs, const QualifyConfig& cfg) {
  for (size_t k = 0; k < pairs; ++k) {
    Partner& p = partners[k];
    if (p.lat_us.empty()) continue;
    SendOptions o;
    o.tag = p.tag;
    o.timeout = cfg.timeout;
    const auto count = int64_t(p.lat_us.size());
    Tensor mine = Tensor::empty({count}, DType::Float64);
    std::copy(p.lat_us.begin(), p.lat_us.end(), mine.data_as<double>());
    const Tensor out = mine.to(g.tensor_device());
    Tensor in = Tensor::empty({count}, DType::Float64, g.tensor_device());
    auto s = g.isend(out, p.peer, o);
    g.irecv(in, p.peer, o)->wait(o.timeout);
    s->wait(o.timeout);
    const Tensor got = from_device(in);
    p.partner_lat_us.assign(got.data_as<double>(), got.data_as<double>() + count);
  }
}

// How long a rank may wait at one point of the schedule: every wait of one step.
std::chrono::milliseconds step_bound(const QualifyConfig& cfg) { return cfg.timeout * kWaitsPerExchange; }

// The rounds, interleaved: iteration by iteration, one step of the ring (when `ring`; every
// node sends to the next and receives from the previous at once) and then one step of each
// round, so that load that comes and goes on a host falls on every direction alike instead of
// on whichever round ran at the time. `peers[r]` is this node's partner in round r (-1: none).
// Returns the direction this node received in each round (src -1 where it sat out), the
// ring's last.
std::vector<Edge> measure(Backend& g, const std::vector<int>& peers, bool ring, const QualifyConfig& cfg, bool bisect,
                          int tag) {
  const int me = g.rank(), n = g.size();
  std::vector<Partner> partners;
  for (size_t r = 0; r < peers.size(); ++r)
    if (peers[r] >= 0) partners.push_back({peers[r], peers[r], tag + int(r), {}, {}});
  if (ring) partners.push_back({(me + 1) % n, (me + n - 1) % n, tag - 1, {}, {}});
  Buffers buf = buffers(g, cfg);
  BarrierOptions bo;
  bo.timeout = step_bound(cfg) * int64_t(peers.size() + 1);
  for (int i = 0; i < cfg.warmup + cfg.iters; ++i) {
    if (ring) {
      g.barrier(bo);  // the ring's step starts everywhere at once
      step(g, buf, partners.back(), cfg, i >= cfg.warmup);
    }
    for (size_t k = 0; k + ring < partners.size(); ++k) step(g, buf, partners[k], cfg, i >= cfg.warmup);
  }
  swap_latencies(g, partners, partners.size() - size_t(ring), cfg);
  std::vector<Edge> mine;
  size_t k = 0;
  for (int peer : peers) {
    Edge e;
    e.src = -1;
    if (peer >= 0) e = edge_of(partners[k++], me, cfg);
    e.bisect = bisect;
    mine.push_back(e);
  }
  if (ring) mine.push_back(edge_of(partners.back(), me, cfg));
  return mine;
}

// src, dst, bw, bw tail, lat, lat tail, bisect, lat median, pair's lat median (src < 0: none)
constexpr int kFields = 9;

void pack(const Edge& e, double* p) {
  p[0] = e.src, p[1] = e.dst, p[2] = e.bw_gbps, p[3] = e.bw_tail_gbps, p[4] = e.lat_us, p[5] = e.lat_tail_us;
  p[6] = e.bisect, p[7] = e.lat_med_us, p[8] = e.lat_pair_us;
}

Edge unpack(const double* p) {
  Edge e;
  e.src = int(p[0]), e.dst = int(p[1]), e.bw_gbps = p[2], e.bw_tail_gbps = p[3], e.lat_us = p[4];
  e.lat_tail_us = p[5], e.bisect = p[6] != 0, e.lat_med_us = p[7], e.lat_pair_us = p[8];
  return e;
}


// One direction from each node (its `mine`, or none when its src is negative) on every node:
// n records, so a round at a time holds O(n).
std::vector<Edge> gather_round(Backend& g, const Edge& mine, std::chrono::milliseconds timeout) {
  Tensor local = Tensor::empty({kFields}, DType::Float64);
  pack(mine, local.data_as<double>());
  Tensor every = Tensor::empty({int64_t(kFields) * g.size()}, DType::Float64, g.tensor_device());
  AllgatherOptions o;
  o.timeout = timeout;
  g.all_gather(local.to(g.tensor_device()), every, o);
  const Tensor c = from_device(every);
  const double* q = c.data_as<double>();
  std::vector<Edge> all;
  for (int i = 0; i < g.size(); ++i)
    if (q[i * kFields] >= 0) all.push_back(unpack(q + i * kFields));
  return all;
}

// The distributions of every node's directions (`mine`), the same on every node: summed by one
// all_reduce (a fixed size).
DirectionSummary summarize(Backend& g, const std::vector<Edge>& mine, const QualifyConfig& cfg) {
  DirectionSummary s;
  std::vector<Edge> received;
  for (const Edge& e : mine)
    if (e.src >= 0) s.add(e), received.push_back(e);
  s.add_node(received);
  Tensor cells = Tensor::empty({int64_t(s.cells().size())}, DType::Float64);
  std::copy(s.cells().begin(), s.cells().end(), cells.data_as<double>());
  Tensor summed = cells.to(g.tensor_device());
  AllreduceOptions ro;
  ro.timeout = cfg.timeout;
  g.all_reduce(summed, ro);
  const Tensor back = from_device(summed);
  std::copy(back.data_as<double>(), back.data_as<double>() + s.cells().size(), s.cells().begin());
  return s;
}

// The judgement of every node's directions against the reference and thresholds of `s`, the
// same on every node: the directions a round at a time, each marked and handed to the judge.
// Every direction is kept in `kept` only when asked (to write them out).
Judgement judge_world(Backend& g, const std::vector<NodeId>& nodes, const DirectionSummary& s,
                      const std::vector<Edge>& mine, double ring_bw, const QualifyConfig& cfg, std::vector<Edge>& kept,
                      std::vector<std::pair<int, int>> again = {}) {
  Judge judge(nodes, cfg.expect, s, ring_bw, std::move(again));
  kept.clear();
  for (const Edge& e : mine) {
    std::vector<Edge> round = gather_round(g, e, cfg.timeout);
    for (Edge& x : round) judge.mark(x);
    if (cfg.keep_directions) kept.insert(kept.end(), round.begin(), round.end());
    judge.add(std::move(round));
  }
  return judge.finish();
}

// The verdict, from world rank 0 (a node) to every rank: per node its figures and verdict, the
// links, the ring: O(n + links).
void share_with_world(Backend& world, QualifyResult& r, std::chrono::milliseconds timeout) {
  constexpr int kHead = 7, kNode = 9, kLink = 4;
  Judgement& j = r.judgement;
  BroadcastOptions o;
  o.root = 0;
  o.timeout = timeout;
  Tensor head = Tensor::empty({kHead}, DType::Float64);
  double* h = head.data_as<double>();
  h[0] = double(j.suspect_links.size()), h[1] = r.ring_bw_gbps, h[2] = r.ring_lat_us, h[3] = r.rounds;
  h[4] = r.bisect_rounds, h[5] = double(j.directions), h[6] = j.ring_slow;
  Tensor hd = head.to(world.tensor_device());
  world.broadcast(hd, o);
  const Tensor hc = from_device(hd);
  const double* got = hc.data_as<double>();
  const size_t links = size_t(got[0]), n = r.nodes.size();
  r.ring_bw_gbps = got[1], r.ring_lat_us = got[2], r.rounds = int(got[3]), r.bisect_rounds = int(got[4]);
  j.directions = size_t(got[5]), j.ring_slow = got[6] != 0;
  Tensor body = Tensor::empty({int64_t(n * kNode + links * kLink)}, DType::Float64);
  double* b = body.data_as<double>();
  j.nodes.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const NodeVerdict& v = j.nodes[i];
    double* p = b + i * kNode;
    p[0] = v.out_bw_gbps, p[1] = v.in_bw_gbps, p[2] = v.lat_us, p[3] = v.pairs, p[4] = v.slow_pairs;
    p[5] = v.slow_out, p[6] = v.slow_in, p[7] = double(v.verdict), p[8] = v.noisy_pairs;
  }
  for (size_t i = 0; i < j.suspect_links.size(); ++i) {
    const Link& l = j.suspect_links[i];
    double* p = b + n * kNode + i * kLink;
    p[0] = l.a, p[1] = l.b, p[2] = l.a_to_b, p[3] = l.b_to_a;
  }
  Tensor bd = body.to(world.tensor_device());
  world.broadcast(bd, o);
  const Tensor bc = from_device(bd);
  const double* q = bc.data_as<double>();
  j.suspect_nodes.clear();
  for (size_t i = 0; i < n; ++i) {
    const double* p = q + i * kNode;
    j.nodes[i] = {p[0], p[1], p[2], int(p[3]), int(p[4]), int(p[5]), int(p[6]), Verdict(int(p[7])), int(p[8])};
    if (j.nodes[i].verdict == Verdict::Suspect) j.suspect_nodes.push_back(int(i));
  }
  j.suspect_links.clear();
  for (size_t i = 0; i < links; ++i) {
    const double* p = q + n * kNode + i * kLink;
    j.suspect_links.push_back({int(p[0]), int(p[1]), unsigned(p[2]), unsigned(p[3])});
  }
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
  if (n < 2)
    throw ConfigError("qualify needs at least two nodes (or --per-device with two ranks); this world has " +
                      std::to_string(n));
  const Schedule schedule(n, cfg.rounds);
  res.rounds = schedule.rounds();
  std::shared_ptr<Backend> sub;
  Backend* g = &world;
  if (n != world.size()) {
    sub = world.new_group(res.node_ranks);
    g = sub.get();
  }
  if (g) {
    const int tag = 1000, me = g->rank();
    std::vector<int> peers;
    for (int r = 0; r < res.rounds; ++r) peers.push_back(schedule.partner(r, me));
    std::vector<Edge> mine = measure(*g, peers, true, cfg, false, tag);
    // The ring: each node's receiving direction, gathered apart from the pairs'; its figure is
    // the median node's (a collective over every node at once).
    std::vector<double> bw, lat;
    for (const Edge& e : gather_round(*g, mine.back(), cfg.timeout)) bw.push_back(e.bw_gbps), lat.push_back(e.lat_us);
    mine.pop_back();
    res.ring_bw_gbps = median(bw);
    res.ring_lat_us = median(lat);
    // The rounds' reference and thresholds judge the bisection's directions too: a direction
    // measured once is judged once, and its verdict does not move with the thresholds.
    const DirectionSummary rounds = summarize(*g, mine, cfg);
    res.judgement = judge_world(*g, res.nodes, rounds, mine, res.ring_bw_gbps, cfg, res.edges);
    // Bisection, in at most as many rounds again as the references: every node holds the
    // same judgement, so every node plans the same rounds.
    auto extra = bisection_rounds(schedule, res.judgement, cfg.references);
    const size_t most = size_t(res.rounds) + 2 * size_t(cfg.references);
    if (extra.size() > most) extra.resize(most);
    res.bisect_rounds = int(extra.size());
    if (!extra.empty()) {
      std::vector<int> more(extra.size(), -1);
      for (size_t r = 0; r < extra.size(); ++r)
        for (const auto& [a, b] : extra[r])
          if (a == me || b == me) more[r] = a == me ? b : a;
      const auto found = measure(*g, more, false, cfg, true, tag + res.rounds);
      mine.insert(mine.end(), found.begin(), found.end());
      // The pairs measured again count by their second measurement alone (pairs_of: only those
      // measured, after the cut above).
      res.judgement = judge_world(*g, res.nodes, rounds, mine, res.ring_bw_gbps, cfg, res.edges, pairs_of(extra));
    }
  }
  // Ranks that speak for no node wait here for the verdict: every step of the schedule (the
  // rounds, the ring and the bisection's rounds), each of those rounds' swap of latencies (two
  // waits), then every collective of the judging (the ring's gather, two all_reduces, a gather
  // per round twice and one per bisection round, at most 3 R + 2 references + 3), each bounded.
  if (n != world.size()) {
    const int64_t rounds = 2 * res.rounds + 2 * cfg.references + 2;
    const int64_t steps = rounds * (cfg.warmup + cfg.iters);
    const int64_t waits = 2 * rounds + 3 * res.rounds + 2 * cfg.references + 3;
    share_with_world(world, res, step_bound(cfg) * steps + cfg.timeout * waits);
  }
  return res;
}

namespace {

std::string joined(const std::vector<std::string>& parts) {
  std::string s;
  for (const auto& p : parts) s += (s.empty() ? "" : ", ") + p;
  return s.empty() ? "none" : s;
}

std::string exclude_list(const QualifyResult& r) {
  std::vector<std::string> hosts;
  for (int s : r.judgement.suspect_nodes) hosts.push_back(r.nodes[size_t(s)].host);
  return compress_hostlist(hosts);
}

// "a -> b [bw,bw-tail]" for each slow direction of a link.
std::string link_text(const QualifyResult& r, const Link& l) {
  std::vector<std::string> dirs;
  const std::string a = r.nodes[size_t(l.a)].str(), b = r.nodes[size_t(l.b)].str();
  if (l.a_to_b) dirs.push_back(a + " -> " + b + " [" + slow_reasons(l.a_to_b) + "]");
  if (l.b_to_a) dirs.push_back(b + " -> " + a + " [" + slow_reasons(l.b_to_a) + "]");
  return joined(dirs);
}

nlohmann::ordered_json reasons_json(unsigned bits) {
  nlohmann::ordered_json a = nlohmann::ordered_json::array();
  for (unsigned b : {SlowBw, SlowBwTail, SlowLat, SlowLatTail})
    if (bits & b) a.push_back(slow_reasons(b));
  return a;
}

}  // namespace

std::vector<std::string> qualify_report(const QualifyResult& r, const QualifyConfig& cfg) {
  std::vector<std::string> lines;
  char buf[640];
  const Judgement& j = r.judgement;
  const Expectation& e = cfg.expect;
  std::snprintf(buf, sizeof buf,
                "# qualify: %zu nodes; %d rounds of disjoint pairs + %d of bisection; %zu directions measured",
                r.nodes.size(), r.rounds, r.bisect_rounds, j.directions);
  lines.push_back(buf);
  std::snprintf(buf, sizeof buf,
                "# reference (%s): bw %.4f GB/s (tail %.4f), latency p20 %.2f us (tail %.2f, pair's median %.2f); a "
                "direction is slow below "
                "%.3fx its bandwidth or above %.1fx its latency (%.2fx and %.1fx widened by the jitter)",
                j.ref_source.c_str(), j.ref.bw_gbps, j.ref.bw_tail_gbps, j.ref.lat_us, j.ref.lat_tail_us,
                j.ref.lat_pair_us, j.limits.bw_fraction, j.limits.latency_factor, e.min_fraction, e.max_latency_factor);
  lines.push_back(buf);
  std::snprintf(buf, sizeof buf, "# ring send_recv: %.4f GB/s, latency p20 %.2f us: %s", r.ring_bw_gbps, r.ring_lat_us,
                j.ring_slow ? "SLOW (below the threshold of the pairs' reference)" : "ok");
  lines.push_back(buf);
  std::snprintf(buf, sizeof buf, "# %5s  %6s  %-20s  %-16s  %10s  %10s  %10s  %10s  %s", "node", "rank", "hostname",
                "address", "out(GB/s)", "in(GB/s)", "lat(us)", "slow/pairs", "verdict");
  lines.push_back(buf);
  for (size_t i = 0; i < r.nodes.size(); ++i) {
    const auto& v = j.nodes[i];
    const std::string sp = std::to_string(v.slow_pairs) + "/" + std::to_string(v.pairs);
    std::snprintf(buf, sizeof buf, "  %5zu  %6d  %-20s  %-16s  %10.4f  %10.4f  %10.2f  %10s  %s", i, r.node_ranks[i],
                  r.nodes[i].host.c_str(), r.nodes[i].address.c_str(), v.out_bw_gbps, v.in_bw_gbps, v.lat_us,
                  sp.c_str(), verdict_name(v.verdict));
    lines.push_back(buf);
  }
  // The slow directions, then the noisy ones (slow by their tails alone), each with its reasons.
  auto directions = [&](const char* what, const std::vector<Edge>& shown, size_t count, unsigned Edge::*bits) {
    for (const Edge& x : shown) {
      std::snprintf(buf, sizeof buf,
                    "# %s: %s -> %s: bw %.4f GB/s (tail %.4f), latency p20 %.2f us (tail %.2f, pair's median %.2f) "
                    "[%s]%s",
                    what, r.nodes[size_t(x.src)].str().c_str(), r.nodes[size_t(x.dst)].str().c_str(), x.bw_gbps,
                    x.bw_tail_gbps, x.lat_us, x.lat_tail_us, x.lat_pair_us, slow_reasons(x.*bits).c_str(),
                    x.bisect ? " (bisection)" : "");
      lines.push_back(buf);
    }
    if (count > shown.size())
      lines.push_back(std::string("# ") + what + ": " + std::to_string(count - shown.size()) +
                      " more directions (every direction in -J)");
  };
  directions("slow", j.slow_directions, j.slow_count, &Edge::slow);
  directions("noisy", j.noisy_directions, j.noisy_count, &Edge::noisy);
  std::vector<std::string> names, links;
  for (int s : j.suspect_nodes) {
    const auto& v = j.nodes[size_t(s)];
    names.push_back(r.nodes[size_t(s)].str() + ": slow sending " + std::to_string(v.slow_out) + ", receiving " +
                    std::to_string(v.slow_in));
  }
  for (const Link& l : j.suspect_links) links.push_back(link_text(r, l));
  lines.push_back("# suspect nodes: " + joined(names));
  lines.push_back("# suspect links: " + joined(links));
  if (!j.noisy_nodes.empty()) {
    std::vector<std::string> noisy;
    for (int s : j.noisy_nodes)
      noisy.push_back(r.nodes[size_t(s)].str() + ": " + std::to_string(j.nodes[size_t(s)].noisy_pairs) + " of " +
                      std::to_string(j.nodes[size_t(s)].pairs) + " pairs");
    lines.push_back(
        "# noisy nodes (slow tails, healthy medians: a busy host or an intermittent fault; not failed, "
        "--fail-on-tails to fail): " +
        joined(noisy));
  }
  lines.push_back("# exclude: " + (j.suspect_nodes.empty() ? std::string("none") : exclude_list(r)));
  lines.push_back(std::string("# verdict: ") + (r.failed() ? "FAILED" : "OK"));
  return lines;
}

nlohmann::ordered_json qualify_json(const QualifyResult& r, const QualifyConfig& cfg) {
  const Judgement& j = r.judgement;
  const Expectation& e = cfg.expect;
  nlohmann::ordered_json q;
  q["config"] = {{"bw_bytes", cfg.bw_bytes},
                 {"lat_bytes", cfg.lat_bytes},
                 {"iters", cfg.iters},
                 {"warmup", cfg.warmup},
                 {"per_device", cfg.per_device},
                 {"min_fraction", e.min_fraction},
                 {"max_latency_factor", e.max_latency_factor},
                 {"expect_gbps", e.gbps ? nlohmann::ordered_json(*e.gbps) : nlohmann::ordered_json(nullptr)},
                 {"expect_latency_us",
                  e.latency_us ? nlohmann::ordered_json(*e.latency_us) : nlohmann::ordered_json(nullptr)},
                 {"baseline", bool(e.baseline)},
                 {"fail_on_tails", e.fail_on_tails},
                 {"rounds", r.rounds},
                 {"bisect_rounds", r.bisect_rounds}};
  q["thresholds"] = {{"bw_fraction", j.limits.bw_fraction}, {"latency_factor", j.limits.latency_factor}};
  q["reference"] = {{"source", j.ref_source}, {"bw_gbps", j.ref.bw_gbps},         {"bw_tail_gbps", j.ref.bw_tail_gbps},
                    {"lat_us", j.ref.lat_us}, {"lat_tail_us", j.ref.lat_tail_us}, {"lat_pair_us", j.ref.lat_pair_us}};
  q["ring"] = {{"busbw_gbps", r.ring_bw_gbps}, {"lat_us", r.ring_lat_us}, {"slow", j.ring_slow}};
  nlohmann::ordered_json nodes = nlohmann::ordered_json::array(), dirs = nlohmann::ordered_json::array();
  for (size_t i = 0; i < r.nodes.size(); ++i) {
    const auto& v = j.nodes[i];
    nodes.push_back({{"node", i},
                     {"rank", r.node_ranks[i]},
                     {"host", r.nodes[i].host},
                     {"address", r.nodes[i].address},
                     {"out_bw_gbps", v.out_bw_gbps},
                     {"in_bw_gbps", v.in_bw_gbps},
                     {"lat_us", v.lat_us},
                     {"pairs", v.pairs},
                     {"slow_pairs", v.slow_pairs},
                     {"slow_out", v.slow_out},
                     {"slow_in", v.slow_in},
                     {"noisy_pairs", v.noisy_pairs},
                     {"verdict", verdict_name(v.verdict)}});
  }
  for (const Edge& x : r.edges)
    dirs.push_back({{"src", x.src},
                    {"dst", x.dst},
                    {"bw_gbps", x.bw_gbps},
                    {"bw_tail_gbps", x.bw_tail_gbps},
                    {"lat_us", x.lat_us},
                    {"lat_med_us", x.lat_med_us},
                    {"lat_tail_us", x.lat_tail_us},
                    {"lat_pair_us", x.lat_pair_us},
                    {"phase", x.bisect ? "bisect" : "rounds"},
                    {"slow", reasons_json(x.slow)},
                    {"noisy", reasons_json(x.noisy)}});
  q["nodes"] = nodes;
  q["directions"] = dirs;
  nlohmann::ordered_json sn = nlohmann::ordered_json::array(), sl = nlohmann::ordered_json::array();
  for (int s : j.suspect_nodes)
    sn.push_back({{"node", s}, {"host", r.nodes[size_t(s)].host}, {"address", r.nodes[size_t(s)].address}});
  for (const Link& l : j.suspect_links)
    sl.push_back({{"a", l.a}, {"b", l.b}, {"a_to_b", reasons_json(l.a_to_b)}, {"b_to_a", reasons_json(l.b_to_a)}});
  q["suspect_nodes"] = sn;
  q["suspect_links"] = sl;
  nlohmann::ordered_json nn = nlohmann::ordered_json::array();
  for (int s : j.noisy_nodes)
    nn.push_back({{"node", s}, {"host", r.nodes[size_t(s)].host}, {"address", r.nodes[size_t(s)].address}});
  q["noisy_nodes"] = nn;
  q["exclude"] = exclude_list(r);
  return q;
}

namespace {

nlohmann::ordered_json reference_json(const Reference& f) {
  return {{"bw_gbps", f.bw_gbps},
          {"bw_tail_gbps", f.bw_tail_gbps},
          {"lat_us", f.lat_us},
          {"lat_tail_us", f.lat_tail_us},
          {"lat_pair_us", f.lat_pair_us}};
}

Reference parse_reference(const nlohmann::json& j) {
  return {j.at("bw_gbps").get<double>(), j.at("bw_tail_gbps").get<double>(), j.at("lat_us").get<double>(),
          j.at("lat_tail_us").get<double>(), j.value("lat_pair_us", 0.0)};
}

nlohmann::ordered_json node_json(const NodeId& n) { return {{"host", n.host}, {"address", n.address}}; }

}  // namespace

nlohmann::ordered_json baseline_json(const QualifyResult& r) {
  nlohmann::ordered_json dirs = nlohmann::ordered_json::array();
  for (const Edge& x : r.edges) {
    auto d = reference_json({x.bw_gbps, x.bw_tail_gbps, x.lat_us, x.lat_tail_us, x.lat_pair_us});
    d["src"] = node_json(r.nodes[size_t(x.src)]);
    d["dst"] = node_json(r.nodes[size_t(x.dst)]);
    dirs.push_back(d);
  }
  return {{"kind", "qualify_baseline"}, {"reference", reference_json(r.judgement.ref)}, {"directions", dirs}};
}

Baseline parse_baseline(const nlohmann::json& j, const std::string& file) {
  try {
    if (j.at("kind") != "qualify_baseline")
      throw ConfigError(file + ": not a qualify baseline (kind is not qualify_baseline)");
    Baseline b;
    b.ref = parse_reference(j.at("reference"));
    auto node = [](const nlohmann::json& n) {
      return NodeId{n.at("host").get<std::string>(), n.at("address").get<std::string>()};
    };
    for (const auto& d : j.at("directions"))
      b.edges[Baseline::edge_key(node(d.at("src")), node(d.at("dst")))] = parse_reference(d);
    return b;
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(file + ": not a qualify baseline: " + e.what());
  }
}

}  // namespace distrun::bench
