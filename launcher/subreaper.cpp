#include "subreaper.hpp"

#include <dirent.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace distrun::launcher {
namespace {

// The processes whose parent is this one, from /proc/PID/stat.
std::vector<pid_t> children() {
  std::vector<pid_t> out;
  DIR* d = opendir("/proc");
  if (!d) return out;
  const pid_t self = getpid();
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (*end || pid <= 0) continue;
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE* f = std::fopen(path, "re");
    if (!f) continue;
    char buf[512];
    const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    buf[n] = '\0';
    // "pid (comm) state ppid ...": the name may hold spaces and parentheses, so read after
    // its last ')'.
    long ppid = 0;
    char state = 0;
    if (char* close = std::strrchr(buf, ')');
        close && std::sscanf(close + 1, " %c %ld", &state, &ppid) == 2 && ppid == self)
      out.push_back(pid_t(pid));
  }
  closedir(d);
  return out;
}

}  // namespace

void become_subreaper() { prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); }

void end_adopted_children() {
  for (int round = 0; round < 64; ++round) {
    const std::vector<pid_t> left = children();
    if (left.empty()) return;
    for (pid_t pid : left) kill(pid, SIGKILL);
    // Reaped with a bound: a process stuck in the kernel (D state) may take its time to die.
    for (pid_t pid : left)
      for (int tries = 0; tries < 200; ++tries) {
        int status;
        const pid_t got = waitpid(pid, &status, WNOHANG);
        if (got == pid || (got < 0 && errno != EINTR)) break;
        usleep(10000);
      }
  }
}

}  // namespace distrun::launcher
