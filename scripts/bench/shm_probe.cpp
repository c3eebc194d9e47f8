// What limits intra-node CPU collectives: measures, on this machine, the ceilings a shared-memory
// path would have against Gloo's loopback TCP, for docs/performance.md's proposal.
//   memcpy      one core copying a 256 MiB buffer (the upper bound of any copy-based transport)
//   tcp         one loopback TCP stream between two processes, 1 MiB writes (what Gloo's pairs ride on)
//   shm_*       all_reduce / all_gather / broadcast between N forked processes through one POSIX
//               shared-memory segment and a process-shared barrier: copy in, (reduce one 1/N
//               slice each), copy out; busbw in nccl-tests' terms, as the other bench programs
// Build: g++ -O2 -std=c++17 -pthread -o shm_probe shm_probe.cpp -lrt
// Usage: shm_probe [SIZES=1M,16M,64M] [RANKS=2,4] [ITERS=20]   (prints JSON Lines)
#include <pthread.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

long parse_size(const std::string& s) {
  long v = std::stol(s);
  switch (s.back()) {
    case 'K': return v << 10;
    case 'M': return v << 20;
    case 'G': return v << 30;
    default: return v;
  }
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t comma; (comma = s.find(',', start)) != std::string::npos; start = comma + 1)
    out.push_back(s.substr(start, comma - start));
  out.push_back(s.substr(start));
  return out;
}

void* shared_alloc(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    perror("mmap");
    exit(1);
  }
  return p;
}

void memcpy_probe() {
  const size_t bytes = 256ul << 20;
  std::vector<char> a(bytes, 1), b(bytes, 0);
  std::memcpy(b.data(), a.data(), bytes);  // fault the pages in first
  const int reps = 5;
  auto t0 = Clock::now();
  for (int i = 0; i < reps; ++i) std::memcpy(b.data(), a.data(), bytes);
  const double s = seconds_since(t0) / reps;
  std::printf("{\"probe\": \"memcpy\", \"bytes\": %zu, \"gbps\": %.3f}\n", bytes, bytes / s / 1e9);
}

// One process writes `total` bytes in 1 MiB writes, the other reads them: loopback TCP throughput.
void tcp_probe() {
  const size_t chunk = 1ul << 20, total = 1ul << 30;
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (bind(lfd, reinterpret_cast<sockaddr*>(&addr), len) || listen(lfd, 1) ||
      getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len)) {
    perror("tcp");
    exit(1);
  }
  pid_t child = fork();
  if (child == 0) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), len)) _exit(1);
    std::vector<char> buf(chunk, 7);
    for (size_t sent = 0; sent < total;) {
      ssize_t n = write(fd, buf.data(), chunk);
      if (n <= 0) _exit(1);
      sent += size_t(n);
    }
    close(fd);
    _exit(0);
  }
  int fd = accept(lfd, nullptr, nullptr);
  std::vector<char> buf(chunk);
  auto t0 = Clock::now();
  size_t got = 0;
  for (ssize_t n; (n = read(fd, buf.data(), chunk)) > 0;) got += size_t(n);
  const double s = seconds_since(t0);
  waitpid(child, nullptr, 0);
  close(fd);
  close(lfd);
  std::printf("{\"probe\": \"tcp_loopback\", \"bytes\": %zu, \"gbps\": %.3f}\n", got, got / s / 1e9);
}

struct Shared {
  pthread_barrier_t barrier;
  double slowest[64];
};

// One rank of a shared-memory collective: `slots` holds one full-size buffer per rank, `result`
// the reduced/gathered buffer; every rank keeps its own private input and output.
void shm_rank(const char* coll, int rank, int n, size_t bytes, int iters, Shared* sh, char* slots, char* result) {
  const size_t count = bytes / sizeof(float), slice = count / size_t(n);
  std::vector<float> in(count, float(rank + 1)), out(count, 0.f);
  auto* slot = reinterpret_cast<float*>(slots);
  auto* res = reinterpret_cast<float*>(result);
  auto once = [&] {
    if (!std::strcmp(coll, "all_reduce")) {
      std::memcpy(slot + size_t(rank) * count, in.data(), bytes);  // copy in
      pthread_barrier_wait(&sh->barrier);
      const size_t lo = size_t(rank) * slice, hi = rank == n - 1 ? count : lo + slice;
      for (size_t e = lo; e < hi; ++e) {  // reduce my slice over every rank's slot
        float acc = slot[e];
        for (int r = 1; r < n; ++r) acc += slot[size_t(r) * count + e];
        res[e] = acc;
      }
      pthread_barrier_wait(&sh->barrier);
      std::memcpy(out.data(), res, bytes);  // copy out
    } else if (!std::strcmp(coll, "all_gather")) {
      std::memcpy(res + size_t(rank) * slice, in.data(), slice * sizeof(float));
      pthread_barrier_wait(&sh->barrier);
      std::memcpy(out.data(), res, bytes);
    } else {  // broadcast from rank 0
      if (rank == 0) std::memcpy(res, in.data(), bytes);
      pthread_barrier_wait(&sh->barrier);
      if (rank != 0) std::memcpy(in.data(), res, bytes);
    }
    pthread_barrier_wait(&sh->barrier);  // nobody overwrites the segment while another still reads
  };
  for (int i = 0; i < 3; ++i) once();
  pthread_barrier_wait(&sh->barrier);
  auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) once();
  sh->slowest[rank] = seconds_since(t0) / iters;
  if (!std::strcmp(coll, "all_reduce") && out[0] != float(n * (n + 1) / 2)) {
    std::fprintf(stderr, "shm_probe: wrong all_reduce result %f\n", double(out[0]));
    _exit(1);
  }
}

void shm_probe(const char* coll, int n, size_t bytes, int iters) {
  auto* sh = static_cast<Shared*>(shared_alloc(sizeof(Shared)));
  pthread_barrierattr_t attr;
  pthread_barrierattr_init(&attr);
  pthread_barrierattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_barrier_init(&sh->barrier, &attr, unsigned(n));
  auto* slots = static_cast<char*>(shared_alloc(bytes * size_t(n)));
  auto* result = static_cast<char*>(shared_alloc(bytes));
  std::vector<pid_t> kids;
  for (int r = 0; r < n; ++r) {
    pid_t p = fork();
    if (p == 0) {
      shm_rank(coll, r, n, bytes, iters, sh, slots, result);
      _exit(0);
    }
    kids.push_back(p);
  }
  bool ok = true;
  for (pid_t p : kids) {
    int status = 0;
    waitpid(p, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  double t = 0;
  for (int r = 0; r < n; ++r) t = std::max(t, sh->slowest[r]);
  const double factor = !std::strcmp(coll, "all_reduce")   ? 2.0 * (n - 1) / n
                        : !std::strcmp(coll, "all_gather") ? double(n - 1) / n
                                                           : 1.0;
  if (ok)
    std::printf(
        "{\"system\": \"shm_probe\", \"collective\": \"%s\", \"bytes\": %zu, \"world_size\": %d, \"time_us\": %.3f, "
        "\"algbw_gbps\": %.4f, \"busbw_gbps\": %.4f}\n",
        coll, bytes, n, t * 1e6, bytes / t / 1e9, bytes / t / 1e9 * factor);
  std::fflush(stdout);
  munmap(slots, bytes * size_t(n));
  munmap(result, bytes);
  munmap(sh, sizeof(Shared));
  if (!ok) exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  const auto sizes = split(argc > 1 ? argv[1] : "1M,16M,64M");
  const auto ranks = split(argc > 2 ? argv[2] : "2,4");
  const int iters = argc > 3 ? std::atoi(argv[3]) : 20;
  memcpy_probe();
  tcp_probe();
  std::fflush(stdout);
  for (const char* coll : {"all_reduce", "all_gather", "broadcast"})
    for (const auto& n : ranks)
      for (const auto& s : sizes) shm_probe(coll, std::stoi(n), size_t(parse_size(s)), iters);
  return 0;
}
