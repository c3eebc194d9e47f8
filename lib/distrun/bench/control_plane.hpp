// A load generator for the control plane: N clients against one real store server, speaking
// its real protocol (distrun's: challenge-response, then sealed frames; or torch's TCPStore,
// for comparison), each through one barrier: the one ranks join with in ProcessGroup::init
// (set its own key, add one to a count, the last one in opens a gate all wait on), or, for
// comparison, each waiting for every client's key (O(N) keys per waiter). The server runs in a
// process of its own, so its peak RSS and CPU are its alone; the clients run in as few
// processes as the descriptor limit allows, each socket bound to one of many loopback source
// addresses (127.1.x.y) so that ephemeral ports never run out.
// The rendezvous role (the agents' rendezvous on node 0) needs the launcher's code: it lives in
// launcher/rendezvous/control_plane_load.*, with the same options and result.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace distrun::bench {

struct ControlPlaneOptions {
  std::string role = "store";      // what is loaded: "store" or "rendezvous"
  std::string server = "distrun";  // whose server: "distrun" (authenticated) or "torch"
  int64_t clients = 1024;
  /// "counter": each client sets its key and adds one to a count, the last one in sets the key
  /// all wait on (one wake each); "keys": each sets its key and waits for all N keys.
  std::string barrier = "counter";
  int64_t per_address = 4096;  // clients bound to each loopback source address
  int64_t in_flight = 128;     // connections being opened (and authenticated) at once, in all
  std::chrono::milliseconds timeout{120000};
  std::string python = "/usr/bin/python3";  // for server "torch"
  // Rendezvous: how often each agent watches (distrun's --monitor-interval default), and how
  // long node 0's CPU is measured while the agents heartbeat: two of their beat periods (an
  // eighth of distrun's 30 s heartbeat timeout), so that each is counted whole.
  std::chrono::milliseconds interval{100};
  std::chrono::milliseconds heartbeat_window{7500};
};

struct ControlPlaneResult {
  ControlPlaneOptions options;
  int client_processes = 0;
  double connect_s = 0;  // first connect started to the last client authenticated
  double barrier_s = 0;  // every client connected to the last one through the barrier
  double server_peak_rss_mb = 0;
  double server_cpu_s = 0;  // user + system, from its start to its end
  // Rendezvous: every agent through one round (node 0's plan in every agent's hands); node 0's
  // CPU while the agents heartbeat, in percent of one core; from one agent's connection closed
  // to the last other agent told of it.
  double round_s = 0;
  double heartbeat_cpu_pct = 0;
  double failure_fanout_s = 0;
};

/// Runs one measurement. ConfigError when the options are invalid or the machine cannot hold
/// that many descriptors; TimeoutError when the clients are not through in time; StoreError
/// when a server misbehaves.
ControlPlaneResult run_control_plane(const ControlPlaneOptions& options);

/// One JSON line: role, server, clients, connect_s, barrier_s (store) or round_s,
/// heartbeat_cpu_pct, failure_fanout_s (rendezvous), server_peak_rss_mb, ...
std::string control_plane_json(const ControlPlaneResult& r);

}  // namespace distrun::bench
