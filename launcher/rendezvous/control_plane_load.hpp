// distrun-bench control-plane --role rendezvous: the agents' rendezvous under load. Node 0's
// agent is the StaticRendezvous a static multi-node job (--nnodes N) runs, in a process of its
// own (its CPU and peak RSS alone); the N other agents are StaticRendezvous objects of node
// ranks 1..N without workers, one thread each in client processes, so they speak the real
// protocol (the job secret's challenge-response, sealed frames, the same keys) with no copy of
// it. It lives in the launcher because that is where the rendezvous is; distrun-bench links it.
#pragma once
#include "distrun/bench/control_plane.hpp"

namespace distrun::launcher {

/// One measurement: every agent connected (connect_s), one round (round_s: from the go to the
/// last agent holding node 0's plan), node 0's CPU while the agents watch at
/// options.interval for options.heartbeat_window (heartbeat_cpu_pct), then the connection of
/// the last agent closed and the time until every other agent's watch has reported it
/// (failure_fanout_s). ConfigError for invalid options; TimeoutError when a phase overruns
/// options.timeout; StoreError or the rendezvous' own errors when an agent fails.
bench::ControlPlaneResult run_rendezvous_load(const bench::ControlPlaneOptions& options);

}  // namespace distrun::launcher
