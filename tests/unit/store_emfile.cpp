// The store server out of file descriptors (EMFILE): it logs the shortage once (and once for a
// trickle of connections that keep finding it short, not twice per retry), backs off
// instead of spinning on a readable listening socket, keeps serving the rank already in, makes
// room by closing strangers, and accepts again once descriptors are free.
// Usage: distrun-test-store-emfile (exit 0 pass, 1 fail)
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <dirent.h>
#include <mutex>
#include <spdlog/sinks/base_sink.h>
#include <string>
#include <thread>
#include <vector>

#include "distrun/core/log.hpp"
#include "distrun/store/tcp_store.hpp"

using namespace distrun;
using namespace std::chrono_literals;

namespace {

class Lines : public spdlog::sinks::base_sink<std::mutex> {
 public:
  std::vector<std::string> seen;
  int count(const std::string& needle) {
    std::lock_guard<std::mutex> lock(mutex_);
    int n = 0;
    for (auto& l : seen) n += l.find(needle) != std::string::npos;
    return n;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& m) override { seen.emplace_back(m.payload.data(), m.payload.size()); }
  void flush_() override {}
};

int failures = 0;
void check(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAIL", what.c_str());
  failures += !ok;
}

int open_fds() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  while (readdir(d)) ++n;
  closedir(d);
  return n - 3;  // ".", ".." and the directory itself
}

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// A child that connects `n` silent strangers, `pace` apart, and holds them until its stdin closes.
pid_t flood(uint16_t port, int n, int& release_fd, std::chrono::milliseconds pace = 0ms) {
  int p[2];
  if (pipe(p) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    close(p[1]);
    std::vector<int> held;
    for (int i = 0; i < n; ++i) {
      int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(port);
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) held.push_back(fd);
      std::this_thread::sleep_for(pace);
    }
    char c;
    (void)!read(p[0], &c, 1);
    _exit(0);
  }
  close(p[0]);
  release_fd = p[1];
  return pid;
}

}  // namespace

int main() {
  auto lines = std::make_shared<Lines>();
  log().sinks().push_back(lines);
  TCPStoreServerOptions so;
  so.host = "127.0.0.1";
  so.secret = "s3cret";
  TCPStoreServer server(so);
  TCPStoreOptions o;
  o.secret = "s3cret";
  o.timeout = 10s;
  TCPStore rank("127.0.0.1", server.port(), o);
  rank.set("before", "1");

  // Few descriptors left to this process (the server's): the flood exhausts them.
  rlimit old{};
  getrlimit(RLIMIT_NOFILE, &old);
  rlimit tight = old;
  tight.rlim_cur = rlim_t(open_fds() + 3 + 16);
  int release = -1;
  pid_t child = flood(server.port(), 150, release);  // forked before the limit: its own is wide
  setrlimit(RLIMIT_NOFILE, &tight);
  std::this_thread::sleep_for(1500ms);  // the child connects; the server fills up and backs off
  const double cpu0 = cpu_seconds();
  std::this_thread::sleep_for(2s);
  const double cpu = cpu_seconds() - cpu0;
  check(lines->count("out of file descriptors") == 1,
        "the shortage is logged once (" + std::to_string(lines->count("out of file descriptors")) + " lines)");
  check(cpu < 1.0, "no spinning while out of descriptors: " + std::to_string(cpu) + " s of CPU in 2 s");
  rank.set("during", "2");
  check(rank.get("before") == "1" && rank.get("during") == "2", "the rank already in is still served");

  close(release);  // the strangers go away
  int status = 0;
  waitpid(child, &status, 0);
  setrlimit(RLIMIT_NOFILE, &old);
  bool joined = false;
  try {
    TCPStore late("127.0.0.1", server.port(), o);
    joined = late.get("during") == "2";
  } catch (const std::exception& e) {
    std::printf("late client: %s\n", e.what());
  }
  check(joined, "a rank joins once descriptors are free again");
  for (int i = 0; i < 200 && lines->count("accepting connections again") == 0; ++i) std::this_thread::sleep_for(20ms);
  check(lines->count("accepting connections again") == 1, "the end of the shortage is logged once");

  // At the edge again, a trickle of strangers, one every 40 ms for 2.4 s: each few find the
  // descriptors short once more, and are let in as the oldest give way. One episode, one line
  // (not two per retry), and its end one more.
  const int short_before = lines->count("out of file descriptors");
  const int again_before = lines->count("accepting connections again");
  tight.rlim_cur = rlim_t(open_fds() + 3);
  int release_trickle = -1;
  pid_t trickle = flood(server.port(), 60, release_trickle, 40ms);
  setrlimit(RLIMIT_NOFILE, &tight);
  std::this_thread::sleep_for(2400ms);
  const int shortages = lines->count("out of file descriptors") - short_before;
  const int ends = lines->count("accepting connections again") - again_before;
  check(shortages == 1, "a trickle at the edge is one episode: " + std::to_string(shortages) + " shortage lines");
  check(ends == 0, "and it has not ended while the trickle lasts: " + std::to_string(ends) + " end lines");
  close(release_trickle);
  waitpid(trickle, &status, 0);
  setrlimit(RLIMIT_NOFILE, &old);
  log().sinks().pop_back();
  return failures ? 1 : 0;
}
