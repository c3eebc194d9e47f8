// A real run without a device: every rank of `distrun-worker --device cuda` on a seed scenario exits 2
// with "distrun: error: ... no CUDA device is visible ...". Ranks are separate processes
// meeting through the TCP store, as under the launcher. Skips (77) where distrun-worker is not
// built yet or a device is visible (see device_gate_main.cpp).
#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <thread>

using Catch::Matchers::Contains;

namespace {

// A TCP port that was free a moment ago (bind to port 0 and read it back).
int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  close(fd);
  if (!ok) throw std::runtime_error("no free loopback port");
  return ntohs(a.sin_port);
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// The scenario's world_size, or 1 when it sets none.
int world_size_of(const std::string& scenario) {
  std::smatch m;
  std::string text = read_file(scenario);
  if (std::regex_search(text, m, std::regex("(^|\\n)world_size:\\s*(\\d+)"))) return std::stoi(m[2]);
  return 1;
}

struct Rank {
  pid_t pid;
  std::string stderr_path;
  int status = -1;
};

// Starts `worker scenario` as rank `r` of `n`, its stderr to a file.
Rank spawn(const std::string& worker, const std::string& scenario, int r, int n, int port, const std::string& dir) {
  Rank rank{0, dir + "/rank" + std::to_string(r) + ".err"};
  rank.pid = fork();
  if (rank.pid == 0) {
    setenv("RANK", std::to_string(r).c_str(), 1);
    setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
    setenv("WORLD_SIZE", std::to_string(n).c_str(), 1);
    setenv("LOCAL_WORLD_SIZE", std::to_string(n).c_str(), 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
    if (!freopen(rank.stderr_path.c_str(), "w", stderr)) _exit(125);
    if (!freopen("/dev/null", "w", stdout)) _exit(125);
    execl(worker.c_str(), worker.c_str(), scenario.c_str(), "--device", "cuda", "--timeout", "20",
          static_cast<char*>(nullptr));
    _exit(126);
  }
  return rank;
}

}  // namespace

TEST_CASE("distrun-worker on a GPU scenario without a device exits 2 with the reason", "[nccl][process]") {
  const std::string worker = DISTRUN_WORKER_PATH, scenario = DISTRUN_GPU_SCENARIO;
  const int n = world_size_of(scenario);
  char tmpl[] = "/tmp/distrun-nccl-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const int port = free_port();
  std::vector<Rank> ranks;
  for (int r = 0; r < n; ++r) ranks.push_back(spawn(worker, scenario, r, n, port, dir));

  // Every wait has a deadline: a rank still running after it is killed, and the test fails.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  for (auto& rank : ranks) {
    while (waitpid(rank.pid, &rank.status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(rank.pid, SIGKILL);
        waitpid(rank.pid, &rank.status, 0);
        FAIL_CHECK("rank pid " << rank.pid << " did not exit within 90 s");
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  for (size_t r = 0; r < ranks.size(); ++r) {
    INFO("rank " << r << " stderr: " << read_file(ranks[r].stderr_path));
    CHECK(WIFEXITED(ranks[r].status));
    CHECK(WEXITSTATUS(ranks[r].status) == 2);
    std::string err = read_file(ranks[r].stderr_path);
    CHECK_THAT(err, Contains("distrun: error:") && Contains("no CUDA device is visible ("));
    std::remove(ranks[r].stderr_path.c_str());
  }
  rmdir(dir.c_str());
}
