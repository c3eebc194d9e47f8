// The TCP path over plain sockets (socket_mesh.hpp): the path between hosts, and on one host when
// shared memory cannot or must not be used (see path.hpp for the model). As on any TCP path, a
// rank cannot read a peer's memory, so in each phase it sends what every reader takes from it
// while it receives its own pieces; everything happens in the calling thread, one poll() over
// the sockets in use, and a piece to fold in is folded as it arrives.
//
// The intent check: in groups of up to 16 a rank's row goes with a buffer of up to 64 KiB (less
// in larger groups) in the same message, so that a small collective's first phase is served
// from what the check brought.
//
// Between two ranks each sends its row to the other: a small collective is one message each
// way. A larger buffer's first phase does not wait for the check either: meet posts the row
// and returns, the first phase sends what its readers take right behind it, and only then
// waits for the peer's row, so the check costs no round trip before the data (a one-way
// stream, broadcast, keeps its link busy from one call to the next). On a disagreement the
// unsent bytes still go out (copied, so that the stream keeps its framing) and the peer drops
// them unread.
//
// In groups of 3 to 16 the rows go to a hub (rank 0) only, which checks them and sends every
// row back to each rank, riding on its first message to it (hub() in path.hpp): each message
// costs its sender about 10 us of kernel CPU between namespace hosts, and every rank's row to
// every rank would be n(n - 1) messages a call, 12 at four ranks, where a small collective
// through the hub is 2(n - 1), 6, in two hops (each buffer within eager_ riding with its row;
// a larger one adds its own message). A rank settles its check on the hub's answer
// before its first phase sends or reads a byte (only what rode with its row went ahead), and
// the hub settles before it sends, so that its answer can ride on its data.
//
// Either way a rank reads a peer's bytes only once every intent agrees, never past the extent
// the sender stated, and a disagreement is the same error on every rank (each decodes the same
// rows). In larger groups the rows travel around a ring first (n - 1 steps, two connections
// per rank), so that a group opens only the connections its schedules use.
#pragma once
#include <memory>
#include <vector>

#include "distrun/host/path.hpp"
#include "distrun/host/paths/socket_mesh.hpp"

namespace distrun {

class SocketPath : public Path {
 public:
  /// Groups up to this size check intents in one round: two ranks each to the other, larger
  /// groups through the hub (beyond it, around a ring).
  static constexpr int kDirectCheckMost = 16;
  /// Groups from this size to kDirectCheckMost check through the hub.
  static constexpr int kHubCheckLeast = 3;
  /// Through the hub, the flags of a row of its answer that marks a rank it waited for in vain
  /// (kLate) or whose row was not well_formed (kMalformed): every rank raises the same error
  /// naming it. A row that comes to the hub carrying either is not well_formed.
  static constexpr uint64_t kLate = uint64_t(1) << 62, kMalformed = uint64_t(1) << 61;

  SocketPath(std::shared_ptr<SocketMesh> mesh, std::vector<int> global_ranks);

  std::string name() const override { return "tcp"; }
  bool reads_peers() const override { return false; }
  int hub() const override { return hub_; }
  /// An intent marked kAgreed (the hierarchical path checked the whole group already) skips
  /// the check.
  const std::vector<Intent>& meet(Intent intent, const void* base, uint64_t extent,
                                  std::chrono::milliseconds timeout) override;
  void run(Schedule& schedule, int phase, std::chrono::milliseconds timeout) override;
  /// Completes a check that no phase completed (agree() runs none) and, at the hub, sends the
  /// answers no phase carried; every phase waited for its sends.
  void finish(std::chrono::milliseconds timeout) override;

 private:
  using Clock = SocketMesh::Clock;
  // How long a rank waits for the hub's answer past its own deadline, and the hub for its
  // answers to go out on a failure.
  static constexpr std::chrono::milliseconds kVerdictGrace{1000};
  // The rows (and eager bytes) of every rank, a slot of stride_ bytes each.
  char* slot(int r) { return reinterpret_cast<char*>(inbox_.data()) + stride_ * size_t(r); }
  using Sends = std::vector<std::pair<int, std::shared_ptr<SocketMesh::Send>>>;
  using Recvs = std::vector<std::pair<int, std::shared_ptr<SocketMesh::Recv>>>;
  // Through the hub, every rank but the hub: it sends its row to the hub and waits for the
  // hub's answer (every row), never for a peer's row.
  bool answered() const { return hub_ >= 0 && rank_ != hub_; }
  // Posts this rank's row and the check's receives (into rows_): between two ranks to the peer
  // and from it; through the hub, at the hub a receive for every peer's row, elsewhere the row
  // to the hub and a receive for its answer.
  void post_rows(const Intent& intent, Clock::time_point deadline);
  void check_around_ring(const Intent& intent, Clock::time_point deadline);
  // Waits for the rows post_rows posted (or the hub's answer) and checks them, once; `early`:
  // what this rank sent before the check (given its own bytes on a disagreement, so that
  // abandoning them leaves them queued). At the hub, a disagreement sends every answer first.
  void settle(Clock::time_point deadline, const Sends& early = {});
  // At the hub: posts the answer still owed to `peer` (`more`: a message follows at once),
  // adding it to `sends`.
  void answer(int peer, Sends& sends, Clock::time_point deadline, bool more = false);
  // At the hub: sends every answer still owed and waits until they are written. `quietly`, on
  // the way out of a failure (the caller's error is the one to report): a peer this fails on
  // fails on its own, the others still get the verdict, and nothing is thrown.
  void answer_rest(Clock::time_point deadline, bool quietly = false);
  // Whether the row that came from rank r into its slot (decoded into table_) is one of this
  // group's: a whole row without the hub's marks, and behind it exactly the bytes it states it
  // carries (kInline: its extent, else none), so that no byte an earlier collective left in
  // the slot is relayed.
  bool well_formed(const SocketMesh::Recv& row, int r);
  // Moves `sends` and `recvs` (posted to the peers alongside) on until done, abandoning them
  // on failure; a receive whose message had another size is left `differs`, for the caller.
  void progress(const Sends& sends, const Recvs& recvs, Clock::time_point deadline,
                const std::function<void()>& on_read = {});
  // Throws naming the sender of a message of another size than its receive's.
  void check_sizes(const Recvs& recvs) const;
  // As progress, and check_sizes.
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
  int hub_ = -1;
  std::vector<char> answer_;  // every rank's row, as the hub sends it and the others receive it
  std::vector<bool> owed_;    // at the hub: peers not yet sent this collective's answer
  char* base_ = nullptr;      // what this rank exposes
  uint64_t extent_ = 0;
  std::vector<char> scratch_;  // pieces folded in parts land here, kept across calls
};

}  // namespace distrun
