// The launcher's whole run on one node: validate, plan, meet the other nodes, start and
// supervise the workers, restart on failure, report.
#pragma once
#include "options.hpp"

namespace distrun::launcher {

/// Runs `options` and returns distrun's exit status: 0 success, 1 a worker failed or distrun
/// was stopped by a signal (forwarded to the workers; kStoppedBySignalExit, as torchrun).
/// Throws ConfigError (exit 2) for bad input found before any worker starts.
int run_agent(const LaunchOptions& options);

}  // namespace distrun::launcher
