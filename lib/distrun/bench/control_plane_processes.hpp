// What the control plane's load generators share, whatever they load (the store here, the
// agents' rendezvous in the launcher): the processes they fork (the server alone in one, so its
// peak RSS and CPU are its own; the clients in others) and the lines those speak over pipes.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace distrun::bench::control_plane {

/// Descriptors a process needs besides its sockets (pipes, epoll, libraries, stdio).
constexpr int64_t kSpareFds = 64;

/// CLOCK_MONOTONIC in seconds: comparable between the processes of one run.
double now_s();

/// Raises this process's descriptor limit to `want` if it may, else to its hard limit; returns
/// the soft limit now in force.
int64_t raise_fd_limit(int64_t want);

/// A child process and the two pipes that speak with it in lines.
struct Child {
  pid_t pid = -1;
  int to = -1, from = -1;
  std::string buffered;
  std::string what;

  /// One command byte; StoreError when the child is gone.
  void say(char c) const;
  /// The next line it writes, waiting until `deadline` (now_s()); a line "error TEXT" from the
  /// child is a StoreError, silence a TimeoutError.
  std::string line(double deadline);
  /// Closes its pipes and reaps it (killed after 10 s).
  void finish();
};

/// The server's figures at its end.
struct ServerUsage {
  double peak_rss_mb = 0;
  double cpu_s = 0;  // user + system, every thread
};
/// Runs `measure` (which forks `clients` against `server`), then ends the clients and the
/// server, whose last line is own_usage(): its figures. On an exception every process is
/// reaped and the exception goes on.
ServerUsage run_processes(Child& server, std::vector<Child>& clients, const std::function<void()>& measure);

/// Forks; the child closes `close_in_child`, runs `body(in, out)` with its ends of the pipes
/// and exits with its result (an exception becomes the line "error WHAT").
Child fork_child(const std::string& what, const std::vector<int>& close_in_child,
                 const std::function<int(int in, int out)>& body);

void write_line(int fd, const std::string& line);

/// This process's figures so far: "PEAK_RSS_KIB CPU_S" (user + system, every thread).
std::string own_usage();
double own_cpu_s();

/// The number after `word` in `line` ("port 4711"); StoreError when it is not there.
double number_in(const std::string& line, const std::string& word);

/// The loopback address of client `i` when `per_address` clients share each: 127.1.x.y.
uint32_t loopback_address(int64_t i, int64_t per_address);

}  // namespace distrun::bench::control_plane
