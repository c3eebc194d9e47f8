// The job secret that opens the agents' rendezvous store: every node must prove it before any
// key (plan, workers' secret, failure) is read or written. It comes from DISTRUN_STORE_SECRET
// or from --rdzv-secret-file; with several nodes and none, or a weak one, distrun refuses to
// start: a recorded handshake lets anyone try guesses offline, so the secret must be one no
// list of guesses holds.
#pragma once
#include <optional>
#include <string>

#include "distrun/env/world.hpp"

namespace distrun::launcher {

/// The secret of `secret_file` (when given) or of $DISTRUN_STORE_SECRET; nullopt when neither.
/// ConfigError when the file is not a regular file owned by this user with mode 0600 (or
/// stricter), is empty, or is larger than 4 KiB. A FIFO or device is refused before it is
/// opened (opening a FIFO would wait for a writer).
std::optional<std::string> load_job_secret(const std::string& secret_file, const EnvLookup& env);

/// The message (exit 2) for several nodes without a secret: what to set, and how.
std::string missing_secret_message();

/// Bits a job secret must have, as auth::estimated_entropy_bits() counts them.
inline constexpr double kMinSecretBits = 128;

/// ConfigError (exit 2) saying how to make a good one when `secret` has fewer than
/// kMinSecretBits; `from` names where it came from.
void check_secret_strength(const std::string& secret, const std::string& from);

}  // namespace distrun::launcher
