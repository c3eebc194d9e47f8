#include "signal_names.hpp"

#include <sys/wait.h>

#include <cstring>

namespace distrun::launcher {

std::string signal_abbrev(int sig) {
  // sigabbrev_np (glibc >= 2.32) gives "KILL" for 9, nullptr for unknown numbers.
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "SIG" + std::to_string(sig);
}

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    const char* what = strsignal(sig);
    return "signal " + std::to_string(sig) + " (" + signal_abbrev(sig) + (what ? std::string(": ") + what : "") +
           ")" + (WCOREDUMP(status) ? ", core dumped" : "");
  }
  return "status " + std::to_string(status);
}

}  // namespace distrun::launcher
