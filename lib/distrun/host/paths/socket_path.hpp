// The TCP path over plain sockets (socket_mesh.hpp): the path between hosts, and on one host when
// shared memory cannot or must not be used (see path.hpp for the model). As on any TCP path, a
// rank cannot read a peer's memory, so in each phase it sends what every reader takes from it
// while it receives its own pieces; everything happens in the calling thread, one poll() over
// the sockets in use, and a piece to fold in is folded as it arrives.
//
// The intent check: in groups of up to 16 every rank sends its row to every peer, and a buffer
// of up to 64 KiB (less in larger groups) rides in the same message, so a small collective's
// first phase is served from what the check brought: one message each way in all. The receiver
// takes those bytes only once every intent agrees, never past the extent the sender stated. In
// larger groups the rows travel around a ring (n - 1 steps, two connections per rank), so that
// a group opens only the connections its schedules use.
#pragma once
#include <memory>
#include <vector>

#include "distrun/host/path.hpp"
#include "distrun/host/paths/socket_mesh.hpp"

namespace distrun {

class SocketPath : public Path {
 public:
  /// Groups up to this size check intents directly (every rank to every rank).
  static constexpr int kDirectCheckMost = 16;

  SocketPath(std::shared_ptr<SocketMesh> mesh, std::vector<int> global_ranks);

  std::string name() const override { return "tcp"; }
  bool reads_peers() const override { return false; }
  /// An intent marked kAgreed (the hierarchical path checked the whole group already) skips
  /// the check.
  const std::vector<Intent>& meet(Intent intent, const void* base, uint64_t extent,
                                  std::chrono::milliseconds timeout) override;
  void run(Schedule& schedule, int phase, std::chrono::milliseconds timeout) override;
  /// Nothing to wait for: every phase waited for its sends.
  void finish(std::chrono::milliseconds) override {}

 private:
  using Clock = SocketMesh::Clock;
  // The rows (and eager bytes) of every rank, a slot of stride_ bytes each.
  char* slot(int r) { return reinterpret_cast<char*>(inbox_.data()) + stride_ * size_t(r); }
  void check_directly(const Intent& intent, Clock::time_point deadline);
  void check_around_ring(const Intent& intent, Clock::time_point deadline);
  // Waits for `sends` and `recvs` (posted to the peers alongside), abandoning them on failure.
  void await(const std::vector<std::pair<int, std::shared_ptr<SocketMesh::Send>>>& sends,
             const std::vector<std::pair<int, std::shared_ptr<SocketMesh::Recv>>>& recvs, Clock::time_point deadline,
             const std::function<void()>& on_read = {});

  std::shared_ptr<SocketMesh> mesh_;
  int rank_, size_;
  std::vector<int> global_ranks_;
  uint64_t seq_ = 0, exchanges_ = 0;
  size_t row_bytes_ = 0, eager_ = 0, stride_ = 0;  // eager_: the most bytes sent with an intent
  std::vector<uint64_t> inbox_;                    // 8-byte aligned rows
  bool eager_in_ = false;                          // this collective's check brought eager bytes
  std::vector<Intent> table_;
  char* base_ = nullptr;  // what this rank exposes
  uint64_t extent_ = 0;
  std::vector<char> scratch_;  // pieces folded in parts land here, kept across calls
};

}  // namespace distrun
