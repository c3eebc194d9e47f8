// Human-readable names for how a process ended, for failure summaries.
#pragma once
#include <string>

namespace distrun::launcher {

/// "SIGKILL" style abbreviation of signal `sig` ("SIG42" when unknown).
std::string signal_abbrev(int sig);

/// How a waitpid() status ended: "exit code 3" or "signal 9 (SIGKILL: Killed)".
std::string describe_wait_status(int status);

}  // namespace distrun::launcher
