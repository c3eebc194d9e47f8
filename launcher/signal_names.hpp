// Human-readable names for how a process ended, for failure summaries.
#pragma once
#include <string>
#include <vector>

namespace distrun::launcher {

/// "SIGKILL" style abbreviation of signal `sig` ("SIG42" when unknown).
std::string signal_abbrev(int sig);

/// Parses torchrun's --signals-to-handle list ("SIGTERM,SIGINT" or "TERM,2"): ConfigError for
/// an unknown name, and for SIGKILL/SIGSTOP/SIGCHLD, which cannot or must not be taken over.
std::vector<int> parse_signal_list(const std::string& text);

/// How a waitpid() status ended: "exit code 3" or "signal 9 (SIGKILL: Killed)".
std::string describe_wait_status(int status);

}  // namespace distrun::launcher
