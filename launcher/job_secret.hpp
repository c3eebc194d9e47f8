// The job secret that opens the agents' rendezvous store: every node must prove it before any
// key (plan, workers' secret, failure) is read or written. It comes from DISTRUN_STORE_SECRET
// or from --rdzv-secret-file; with several nodes and none, distrun refuses to start.
#pragma once
#include <optional>
#include <string>

#include "distrun/env/world.hpp"

namespace distrun::launcher {

/// The secret of `secret_file` (when given) or of $DISTRUN_STORE_SECRET; nullopt when neither.
/// ConfigError when the file is not a regular file owned by this user with mode 0600 (or
/// stricter), is empty, or is larger than 4 KiB.
std::optional<std::string> load_job_secret(const std::string& secret_file, const EnvLookup& env);

/// The message (exit 2) for several nodes without a secret: what to set, and how.
std::string missing_secret_message();

}  // namespace distrun::launcher
