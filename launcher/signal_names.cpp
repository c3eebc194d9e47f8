#include "signal_names.hpp"

#include <sys/wait.h>

#include <csignal>
#include <cstring>

#include "distrun/core/error.hpp"

namespace distrun::launcher {

std::string signal_abbrev(int sig) {
  // sigabbrev_np (glibc >= 2.32) gives "KILL" for 9, nullptr for unknown numbers.
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "SIG" + std::to_string(sig);
}

std::vector<int> parse_signal_list(const std::string& text) {
  std::vector<int> out;
  size_t at = 0;
  while (at <= text.size()) {
    size_t comma = text.find(',', at);
    std::string item = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    at = comma == std::string::npos ? text.size() + 1 : comma + 1;
    while (!item.empty() && item.front() == ' ') item.erase(0, 1);
    while (!item.empty() && item.back() == ' ') item.pop_back();
    if (item.empty()) continue;
    int sig = 0;
    if (item.find_first_not_of("0123456789") == std::string::npos && item.size() <= 2) {
      sig = std::stoi(item);
    } else {
      std::string name = item.rfind("SIG", 0) == 0 ? item.substr(3) : item;
      for (int s = 1; s < NSIG && !sig; ++s)
        if (const char* a = sigabbrev_np(s); a && name == a) sig = s;
    }
    if (sig <= 0 || sig >= NSIG || !sigabbrev_np(sig))
      throw ConfigError("--signals-to-handle: unknown signal '" + item + "'");
    if (sig == SIGKILL || sig == SIGSTOP || sig == SIGCHLD)
      throw ConfigError("--signals-to-handle: " + signal_abbrev(sig) + " cannot be handled");
    out.push_back(sig);
  }
  return out;
}

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    const char* what = strsignal(sig);
    return "signal " + std::to_string(sig) + " (" + signal_abbrev(sig) + (what ? std::string(": ") + what : "") + ")" +
           (WCOREDUMP(status) ? ", core dumped" : "");
  }
  if (WIFSTOPPED(status)) return "a stop signal: frozen, not ended (" + signal_abbrev(WSTOPSIG(status)) + ")";
  return "status " + std::to_string(status);
}

}  // namespace distrun::launcher
