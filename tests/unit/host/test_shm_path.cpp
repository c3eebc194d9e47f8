// The shared segment of the shared-memory path is used only when it is a sealed memfd of the
// right size.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "distrun/host/paths/shm_path.hpp"

using namespace distrun;

TEST_CASE("the shared segment is mapped only when it is a sealed memfd of the expected size", "[trust]") {
  const int n = 4;
  const off_t want = off_t(ShmPath::segment_bytes(n));
  auto memfd = [&](off_t size, unsigned seals) {
    int fd = memfd_create("distrun-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    REQUIRE(fd >= 0);
    REQUIRE(ftruncate(fd, size) == 0);
    if (seals) REQUIRE(fcntl(fd, F_ADD_SEALS, seals) == 0);
    return fd;
  };
  int good = memfd(want, F_SEAL_SHRINK | F_SEAL_GROW);
  CHECK(ShmPath::segment_problem(good, n) == "");
  // Sealed: nobody can truncate it under a mapping (the SIGBUS a truncated segment caused).
  CHECK(ftruncate(good, 0) != 0);
  CHECK(errno == EPERM);
  CHECK(ShmPath::segment_problem(good, n) == "");
  int truncated = memfd(want / 2, F_SEAL_SHRINK);
  CHECK_THAT(ShmPath::segment_problem(truncated, n),
             Catch::Equals("holds " + std::to_string(want / 2) + " bytes, expected " + std::to_string(want)));
  int unsealed = memfd(want, 0);
  CHECK(ShmPath::segment_problem(unsealed, n) == "not sealed against shrinking");
  char name[] = "/tmp/distrun-segment-XXXXXX";
  int file = mkstemp(name);
  REQUIRE(file >= 0);
  unlink(name);
  REQUIRE(ftruncate(file, want) == 0);
  CHECK(ShmPath::segment_problem(file, n) == "not a sealable memfd");
  for (int fd : {good, truncated, unsealed, file}) close(fd);
}
