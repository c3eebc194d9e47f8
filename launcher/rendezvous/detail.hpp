// What the rendezvous' implementations share: the store's pacing, the strict readers of the
// texts the agents exchange, the workers' port. Internal to launcher/rendezvous/.
#pragma once
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "distrun/core/error.hpp"
#include "distrun/store/tcp_store.hpp"
#include "job_plan.hpp"
#include "ports.hpp"

namespace distrun::launcher::rendezvous_detail {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Short, so a frozen or unreachable node 0 is noticed within seconds during the run (the
// store client adds its own 2 s of slack to a request).
constexpr milliseconds kRequestTimeout{1000};
constexpr milliseconds kSlice{200};    // waits are cut into slices to see signals at once
constexpr milliseconds kLinger{3000};  // node 0 waits this long for the others to read
constexpr int kMaxNodes = 1 << 16;

/// The connections the host's store admits: one per agent (its requests and its listener
/// parked on the failure key share it), room for the agents' tries meanwhile, and never fewer
/// than a store's default. As many may be unauthenticated at once: when every agent connects at
/// the same moment, a smaller pool of strangers evicts agents mid-handshake, and each comes
/// back (4 096 agents: thousands of evictions, each handshake made again on node 0's one thread).
inline size_t store_connections(const JobPlan& plan) {
  return std::max(TCPStoreServerOptions{}.max_connections, size_t(plan.nnodes) + 64);
}

inline std::string where(const JobPlan& plan) { return plan.master_addr + ":" + std::to_string(*plan.master_port); }

inline std::string hostname() {
  char buf[256] = {};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

inline std::string elastic_range(const JobPlan& plan) {
  return std::to_string(plan.min_nodes) + ":" + std::to_string(plan.nnodes);
}

inline std::string secs(milliseconds t) { return std::to_string(t.count() / 1000) + " s"; }

/// A decimal in [lo, hi]; StoreError otherwise (the text came over the network).
inline int to_int(const std::string& s, int lo, int hi) {
  size_t digits = s.size() - (!s.empty() && s[0] == '-' ? 1 : 0);
  if (digits == 0 || s.size() > 9 || s.find_first_not_of("0123456789", s.size() - digits) != std::string::npos)
    throw StoreError("bad number");
  int v = std::stoi(s);
  if (v < lo || v > hi) throw StoreError("number out of range");
  return v;
}

/// The workers' port on `ip`, once per job so that restarts keep it: bound and held in
/// `socket` when the socket is handed to rank 0, else `requested` checked free (PortInUse when
/// taken), else a free one.
inline uint16_t choose_workers_port(const std::string& ip, std::optional<uint16_t> requested, bool hand_socket,
                                    BoundPort& socket) {
  if (hand_socket) {
    socket = BoundPort(ip, requested.value_or(0));
    return socket.port();
  }
  if (requested) {
    BoundPort probe(ip, *requested);
    return *requested;
  }
  return pick_free_port(ip);
}

inline std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

}  // namespace distrun::launcher::rendezvous_detail
