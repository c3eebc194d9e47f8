// The TCP path over plain sockets (socket_mesh.hpp): the path between hosts, and on one host when
// shared memory cannot or must not be used (see path.hpp for the model). As on any TCP path, a
// rank cannot read a peer's memory, so in each phase it sends what every reader takes from it
// while it receives its own pieces; everything happens in the calling thread, one poll() over
// the sockets in use, and a piece to fold in is folded as it arrives.
//
// The intent check: in groups of up to 16 every rank sends its row to every peer, and a buffer
// of up to 64 KiB (less in larger groups) rides in the same message, so a small collective's
// first phase is served from what the check brought: one message each way in all. A larger
// buffer's first phase does not wait for the check either: meet posts the row and returns, the
// first phase sends what its readers take right behind it, and only then waits for the peers'
// rows, so the check costs no round trip before the data (a one-way stream, broadcast, keeps
// its link busy from one call to the next). A rank reads a peer's bytes only once every intent
// agrees, never past the extent the sender stated; on a disagreement every rank throws the same
// error, its unsent bytes still go out (copied, so that the stream keeps its framing) and its
// peers drop them unread. In larger groups the rows travel around a ring first (n - 1 steps,
// two connections per rank), so that a group opens only the connections its schedules use.
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
  /// Completes a check that no phase completed (agree() runs none); every phase waited for its
  /// sends.
  void finish(std::chrono::milliseconds timeout) override { settle(Clock::now() + timeout); }

 private:
  using Clock = SocketMesh::Clock;
  // The rows (and eager bytes) of every rank, a slot of stride_ bytes each.
  char* slot(int r) { return reinterpret_cast<char*>(inbox_.data()) + stride_ * size_t(r); }
  using Sends = std::vector<std::pair<int, std::shared_ptr<SocketMesh::Send>>>;
  using Recvs = std::vector<std::pair<int, std::shared_ptr<SocketMesh::Recv>>>;
  // Posts this rank's row to every peer and a receive for each of theirs (into rows_).
  void post_rows(const Intent& intent, Clock::time_point deadline);
  void check_around_ring(const Intent& intent, Clock::time_point deadline);
  // Waits for the rows post_rows posted and checks them, once; `early`: what this rank sent
  // before the check (given its own bytes on a disagreement, so that abandoning them leaves
  // them queued).
  void settle(Clock::time_point deadline, const Sends& early = {});
  // Waits for `sends` and `recvs` (posted to the peers alongside), abandoning them on failure.
  // Reads no further than the posted receives: what a peer sends next waits in the socket
  // until its receive is posted, unless a send of ours stalls (SocketMesh::progress), when it
  // may be copied aside.
  void await(const Sends& sends, const Recvs& recvs, Clock::time_point deadline,
             const std::function<void()>& on_read = {});

  std::shared_ptr<SocketMesh> mesh_;
  int rank_, size_;
  std::vector<int> global_ranks_;
  uint64_t seq_ = 0, exchanges_ = 0;
  size_t row_bytes_ = 0, eager_ = 0, stride_ = 0;  // eager_: the most bytes sent with an intent
  std::vector<uint64_t> inbox_;                    // 8-byte aligned rows
  bool eager_in_ = false;                          // this collective's check brought eager bytes
  bool unsettled_ = false;                         // rows_ posted, not yet checked
  Sends rows_out_;
  Recvs rows_;
  std::vector<Intent> table_;
  char* base_ = nullptr;  // what this rank exposes
  uint64_t extent_ = 0;
  std::vector<char> scratch_;  // pieces folded in parts land here, kept across calls
};

}  // namespace distrun
