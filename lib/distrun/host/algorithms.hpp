// The collectives' algorithms, written once over a Path (path.hpp): each says what every rank
// exposes and which pieces of its peers' buffers it takes in which phase; the path moves them
// (shared memory reads them, TCP sends what its readers take). Two families:
//
//   direct  every rank takes what it needs from every peer in one phase (two for a large
//           all_reduce: each rank reduces its own block from the peers' copies of it, then
//           takes the peers' finished blocks; a small one takes every peer's whole buffer and
//           reduces them all in rank order, so every rank gets the same bits). The best on a
//           path that reads peers itself (each piece costs the peer nothing), and below 64 KiB
//           on any path (one round instead of n-1).
//   ring    n-1 phases (2(n-1) for all_reduce), each taking one block from the left
//           neighbour: every rank sends (n-1)/n of the data per pass, to one peer, which is
//           what a chain of hosts carries best (and the flat baseline the hierarchical path
//           is measured against).
//
// Which one runs is decided per call from facts every rank shares (the path, the sizes, the
// DISTRUN_ALGO setting), so all ranks run the same schedule.
#pragma once
#include <memory>
#include <vector>

#include "distrun/host/path.hpp"
#include "distrun/host/transport.hpp"

namespace distrun {

/// DISTRUN_ALGO: auto (direct on shared memory; on TCP direct up to 64 KiB per rank, ring
/// above), or one family forced for all_reduce, all_gather and reduce_scatter on any path.
enum class Algorithm { Auto, Direct, Ring };

class PathCollectives : public CollectiveTransport {
 public:
  PathCollectives(std::unique_ptr<Path> path, int rank, int size, Algorithm algorithm);

  std::string name() const override { return path_->name(); }
  /// Runs the schedule of op.intent.kind: algorithms.cpp holds one row per kind (its schedule,
  /// and what it reads and writes), the only place a new collective adds to this layer.
  void run(const HostOp& op, std::chrono::milliseconds timeout) override;

  /// Checks `intent` across the group without moving a byte: the hierarchical path checks the
  /// whole group once, then runs its steps on sub-groups marked kAgreed.
  void agree(const Intent& intent, std::chrono::milliseconds timeout);
  /// The path's hub (Path::hub), or -1.
  int hub() const { return path_->hub(); }

 private:
  std::unique_ptr<Path> path_;
  int rank_, size_;
  Algorithm algorithm_;
  std::vector<char> scratch_;  // kept across calls: the small all_reduce's sum, the ring's partials
};

}  // namespace distrun
