// The summary printed when a worker fails: what torchrun's ChildFailedError says, without
// its noise.
#pragma once
#include <string>

#include "distrun/backend/flight_recorder.hpp"
#include "worker_group.hpp"

namespace distrun::launcher {

/// Multi-line summary naming host, rank, local rank, exit code or signal, time, and the last
/// lines of the worker's stderr. `what` is the program or scenario that ran. When a collective
/// was left unfinished, the flight recorder's last collective of each local rank follows, with
/// the first rank out of step.
std::string format_failure(const WorkerFailure& failure, const std::string& host, const std::string& what);

/// This agent's flight recorder file (made on first use, for `local_ranks` workers), which
/// every worker writes its collectives to (DISTRUN_FLIGHT_RECORDER).
FlightFile& flight_file(int local_ranks);

/// True when the failure looks like the workers' store could not bind MASTER_PORT (lost the
/// race for a port picked free a moment before).
bool looks_like_port_taken(const WorkerFailure& failure);

}  // namespace distrun::launcher
