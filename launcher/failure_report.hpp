// The summary printed when a worker fails: what torchrun's ChildFailedError says, without
// its noise.
#pragma once
#include <string>

#include "worker_group.hpp"

namespace distrun::launcher {

/// Multi-line summary naming host, rank, local rank, exit code or signal, time, and the last
/// lines of the worker's stderr. `what` is the program or scenario that ran.
std::string format_failure(const WorkerFailure& failure, const std::string& host, const std::string& what);

}  // namespace distrun::launcher
