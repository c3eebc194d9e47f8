/* One end of hosts.py's raw-TCP anchors: a ring of these, each sending to the next while it
 * receives from the previous, every link busy both ways at once (the raw ring: one a rank of the
 * placement, in the rank's namespace; the one pair: a ring of two, the first two hosts alone).
 * Build: cc -O2 -pthread -o raw_ring raw_ring.c
 * Usage: raw_ring ADDR PORT NEXT_ADDR NEXT_PORT BYTES [ring|connect|accept]
 *   listens on ADDR:PORT and prints "listening"; after a line on stdin (every end listens)
 *   connects to NEXT_ADDR:NEXT_PORT, accepts the previous end and prints "ready" (ring, the
 *   default; connect or accept: a ring of two, whose next is its previous, over one connection
 *   both ways as between two ranks of a collective, this end connecting or accepting); after a
 *   second line (every end is connected) sends BYTES to the next from one thread while the main
 *   thread receives BYTES from the previous (blocking calls, TCP_NODELAY, 4 MiB at a time), then
 *   prints when it started and finished, in seconds of CLOCK_MONOTONIC, which network namespaces
 *   share: hosts.py takes the ring's time from the first start to the last finish. Exits 1,
 *   saying why on stderr, on any failed call; killed by SIGALRM after kMostSeconds. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { kChunk = 4 << 20, kMostSeconds = 300 };
static char send_buf[kChunk], recv_buf[kChunk];
static int out_fd;
static long long total;

static void fail(const char* what) {
  perror(what);
  exit(1);
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static struct sockaddr_in address(const char* host, const char* port) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(port))};
  if (inet_pton(AF_INET, host, &a.sin_addr) != 1) {
    fprintf(stderr, "raw_ring: not an IPv4 address: %s\n", host);
    exit(1);
  }
  return a;
}

static void wait_line(void) {
  char line[64];
  if (!fgets(line, sizeof line, stdin)) {
    fprintf(stderr, "raw_ring: stdin closed before the ring was ready\n");
    exit(1);
  }
}

static void* sender(void* unused) {
  for (long long left = total; left > 0;) {
    size_t n = left < kChunk ? (size_t)left : kChunk;
    for (size_t off = 0; off < n;) {
      ssize_t w = send(out_fd, send_buf + off, n - off, MSG_NOSIGNAL);  // a lost peer is an error, said
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) fail("raw_ring: send");
      off += (size_t)w;
    }
    left -= (long long)n;
  }
  return unused;
}

int main(int argc, char** argv) {
  const char* mode = argc == 7 ? argv[6] : "ring";
  int connects = strcmp(mode, "accept") != 0, accepts = strcmp(mode, "connect") != 0;
  if ((argc != 6 && argc != 7) || (connects && accepts && strcmp(mode, "ring") != 0)) {
    fprintf(stderr, "usage: raw_ring ADDR PORT NEXT_ADDR NEXT_PORT BYTES [ring|connect|accept]\n");
    return 2;
  }
  // Every wait ends: an end whose neighbour never connects (it failed) dies here, and
  // hosts.py, reading its lines, finds it gone.
  alarm(kMostSeconds);
  total = atoll(argv[5]);
  memset(send_buf, 0x5a, sizeof send_buf);  // real pages: untouched ones would all be the one zero page
  int one = 1;
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in self = address(argv[1], argv[2]), next = address(argv[3], argv[4]);
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(listener, (struct sockaddr*)&self, sizeof self) != 0 || listen(listener, 1) != 0) fail("raw_ring: listen");
  printf("listening\n");
  fflush(stdout);
  wait_line();
  int in_fd = -1;
  if (connects) {
    out_fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(out_fd, (struct sockaddr*)&next, sizeof next) != 0) fail("raw_ring: connect");
    in_fd = out_fd;
  }
  if (accepts) {
    in_fd = accept(listener, NULL, NULL);
    if (in_fd < 0) fail("raw_ring: accept");
    if (!connects) out_fd = in_fd;
  }
  setsockopt(out_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(in_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  printf("ready\n");
  fflush(stdout);
  wait_line();
  pthread_t thread;
  double start = now();
  if (pthread_create(&thread, NULL, sender, NULL) != 0) fail("raw_ring: pthread_create");
  for (long long got = 0; got < total;) {
    ssize_t r = recv(in_fd, recv_buf, kChunk, 0);
    if (r == 0) {
      fprintf(stderr, "raw_ring: the previous rank closed after %lld of %lld bytes\n", got, total);
      return 1;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail("raw_ring: recv");
    got += r;
  }
  pthread_join(thread, NULL);
  printf("%.9f %.9f\n", start, now());
  return 0;
}
