// The launcher's whole run on one node: validate, plan, meet the other nodes, start and
// supervise the workers, restart on failure, report.
#pragma once
#include "options.hpp"

namespace distrun::launcher {

/// Runs `options` and returns distrun's exit status: 0 success, 1 a worker failed,
/// 128+SIG when distrun was stopped by SIG (SIGINT/SIGTERM/SIGHUP, forwarded to the workers).
/// Throws ConfigError (exit 2) for bad input found before any worker starts.
int run_agent(const LaunchOptions& options);

}  // namespace distrun::launcher
