#include "distrun/bench/control_plane_processes.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <sstream>

#include "distrun/core/error.hpp"

namespace distrun::bench::control_plane {

double now_s() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

int64_t raise_fd_limit(int64_t want) {
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  rlimit up{rlim_t(want), std::max(rl.rlim_max, rlim_t(want))};
  if (setrlimit(RLIMIT_NOFILE, &up) != 0) {  // raising the hard limit needs CAP_SYS_RESOURCE
    up = {rl.rlim_max, rl.rlim_max};
    setrlimit(RLIMIT_NOFILE, &up);
  }
  getrlimit(RLIMIT_NOFILE, &rl);
  return int64_t(rl.rlim_cur);
}

void Child::say(char c) const {
  if (::write(to, &c, 1) != 1) throw StoreError("control-plane bench: " + what + " is gone");
}

std::string Child::line(double deadline) {
  for (;;) {
    auto nl = buffered.find('\n');
    if (nl != std::string::npos) {
      std::string l = buffered.substr(0, nl);
      buffered.erase(0, nl + 1);
      if (l.rfind("error ", 0) == 0) throw StoreError("control-plane bench: " + what + ": " + l.substr(6));
      return l;
    }
    const double left = deadline - now_s();
    if (left <= 0) throw TimeoutError("control-plane bench: " + what + " did not answer in time");
    pollfd p{from, POLLIN, 0};
    if (::poll(&p, 1, int(left * 1000) + 1) <= 0) continue;
    char buf[512];
    const ssize_t n = ::read(from, buf, sizeof buf);
    if (n <= 0) throw StoreError("control-plane bench: " + what + " ended without a word");
    buffered.append(buf, size_t(n));
  }
}

void Child::finish() {
  if (to >= 0) ::close(to);
  to = -1;
  if (from >= 0) ::close(from);
  from = -1;
  if (pid > 0) {
    int status = 0;
    for (int i = 0; i < 200 && ::waitpid(pid, &status, WNOHANG) == 0; ++i) ::usleep(50000);
    if (::waitpid(pid, &status, WNOHANG) == 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
    }
  }
  pid = -1;
}

ServerUsage run_processes(Child& server, std::vector<Child>& clients, const std::function<void()>& measure) {
  try {
    measure();
  } catch (...) {
    for (auto& c : clients) c.finish();
    server.finish();
    throw;
  }
  for (auto& c : clients) c.finish();
  ::close(server.to);
  server.to = -1;
  std::istringstream usage(server.line(now_s() + 60));
  double rss_kb = 0;
  ServerUsage u;
  usage >> rss_kb >> u.cpu_s;
  u.peak_rss_mb = rss_kb / 1024;
  server.finish();
  return u;
}

Child fork_child(const std::string& what, const std::vector<int>& close_in_child,
                 const std::function<int(int in, int out)>& body) {
  int down[2], up[2];
  if (::pipe2(down, O_CLOEXEC) != 0 || ::pipe2(up, O_CLOEXEC) != 0)
    throw StoreError("control-plane bench: pipe: " + std::string(std::strerror(errno)));
  const pid_t pid = ::fork();
  if (pid < 0) throw StoreError("control-plane bench: fork: " + std::string(std::strerror(errno)));
  if (pid == 0) {
    // A bench that dies takes its children with it (their threads may be in long waits).
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() == 1) ::_exit(1);
    for (int fd : close_in_child) ::close(fd);
    ::close(down[1]);
    ::close(up[0]);
    int rc = 1;
    try {
      rc = body(down[0], up[1]);
    } catch (const std::exception& e) {
      std::string msg = std::string("error ") + e.what() + "\n";
      std::replace(msg.begin(), msg.end() - 1, '\n', ' ');
      (void)!::write(up[1], msg.data(), msg.size());
    }
    ::_exit(rc);
  }
  ::close(down[0]);
  ::close(up[1]);
  Child c;
  c.pid = pid;
  c.to = down[1];
  c.from = up[0];
  c.what = what;
  return c;
}

void write_line(int fd, const std::string& l) {
  std::string s = l + "\n";
  if (::write(fd, s.data(), s.size()) != ssize_t(s.size())) throw StoreError("cannot write to the bench");
}

double own_cpu_s() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

std::string own_usage() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return std::to_string(u.ru_maxrss) + " " + std::to_string(own_cpu_s());
}

double number_in(const std::string& line, const std::string& word) {
  std::istringstream is(line);
  std::string w;
  double v = 0;
  if (!(is >> w >> v) || w != word) throw StoreError("control-plane bench: unexpected line '" + line + "'");
  return v;
}

uint32_t loopback_address(int64_t i, int64_t per_address) {
  const auto a = uint32_t(i / per_address);
  return (127u << 24) | (1u << 16) | ((a / 250) << 8) | (a % 250 + 1);
}

}  // namespace distrun::bench::control_plane
