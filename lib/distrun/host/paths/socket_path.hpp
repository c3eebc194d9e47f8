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
// Between two ranks a broadcast of at most kEagerBroadcastBytes (path.hpp) is eager, as on
// shared memory: the root sends its row with the payload (flagged kEager, with the count of
// eager broadcasts it has rooted) and returns once the socket took it, reading nothing; the
// receiver reads that row, checks it against its own intent (and the count against the eager
// broadcasts it received from that root) and copies the payload out, sending nothing. So a
// root runs ahead of its receiver as far as the socket buffers let it (then its send waits,
// up to the call's deadline, as any send; where its receiver disagreed and so reads no more,
// the root then raises what that receiver said, SocketMesh::give_notice, not a timeout). The
// agreement promise holds with shared memory's
// timing: the rank that sees a disagreement (a receiver against the root's row, a rank that
// meets and finds an eager row, an eager receiver that finds a meeting row, a rank whose
// peer's count says two ranks claimed the root of an earlier one) raises
// CollectiveMismatchError at that call and marks itself broken; an eager receiver also sends
// its marked row then, for the exchange its peer reads next (this one, which a peer that met
// is waiting for; the next one where the peer is the eager root, which has returned), so the
// root learns of it even if the receiver makes no further call. A broken rank raises at the start
// of every later collective on the group, naming the rank that found it and where, after
// sending its marked row (nothing else) to the peer; a rank that reads a marked row raises
// the same error and carries the mark from then on. So the other rank raises at its next
// collective that reads the peer's row: every one but an eager broadcast it roots. Two ranks
// that both claim the root of an eager broadcast read nothing then; each sees the other's
// count at its next collective that reads the peer, not at that call as on shared memory (both
// rows may be in flight at any look short of a round trip). An eager receiver whose root's row does
// not come by its deadline (two ranks that each take the other for the root look so) raises
// the TimeoutError and marks itself broken, so that counts that a claimed root and a missing
// one would cancel never let a later collective pass.
//
// In groups of 3 to 16 a broadcast of at most kEagerBroadcastBytes is eager too: the root sends
// its row and payload to every receiver (n - 1 messages in one hop, where a meeting through the
// hub is 2(n - 1) in two) and returns once the sockets took them; each receiver sends its own
// row (flagged kReceiver, no payload) to the hub (where the hub is the root, only once the
// hub's row has not come within kPassiveSlice), reads the root's row, checks it and copies the
// payload out. Messages are keyed by the group's exchange number, so a root's eager rows and
// the hub's answers on one connection are each read by the call they belong to, whichever comes
// first. In place of a count, every rank folds each eager broadcast's number and root, as it
// sees them, into a digest that the root's row, a receiver's row and every meeting row carry.
// So the hub hears from every rank whatever each runs, and waits for every rank's row both when
// it meets and when it receives (a hub that roots waits for nothing: it takes what came, a mark
// going out in place of its rows): every wait ends without a deadline when the ranks disagree.
// The rank that sees a disagreement (a receiver against its root's row or what came in its
// place; the hub that meets and finds an eager, receiver's or marked row, or a digest unlike its
// own; the hub that receives and finds a row other than the root's eager row and the
// receivers' rows, or one that disagrees; a rank that meets and finds the hub's eager row in
// place of its answer) raises at that call, marks itself broken and
// sends its marked row to every peer, for this exchange (whoever waits on it reads it) and the
// next (for a peer that has returned); a rank that reads a marked row in place of a row it
// waits for does the same. A receiver that is not the hub also reads the hub's message,
// passively, beside its root's: the hub's mark ends its wait where its root meets. A broken
// rank sends its marked row at the start of each later collective and raises; the hub, which
// reads every rank's row at a meeting, answers every rank with the mark, so every rank raises
// at its next meeting at the latest. Two ranks that both claim the root read nothing then; a
// receiver or the hub reads the other's row, or the digests differ at the next collective that
// compares them.
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
#include <exception>
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
  /// In groups of 2 to 16, a broadcast of at most kEagerBroadcastBytes (see above).
  bool broadcast_eager(const Intent& intent, void* data, std::chrono::milliseconds timeout) override;
  /// A row's flags: an eager broadcast's row (its `address` the count of eager broadcasts its
  /// root has rooted between two ranks, the root's digest of them through the hub), and a
  /// broken rank's marked row (`root` the global rank that found the disagreement, `address`
  /// that collective's number, the error's text riding as its bytes). A meeting row's
  /// `address` is its sender's count, or digest, alike.
  static constexpr uint64_t kEager = uint64_t(1) << 60, kBroken = uint64_t(1) << 59;
  /// Through the hub, an eager receiver's row to the hub (its intent and digest, no payload).
  static constexpr uint64_t kReceiver = uint64_t(1) << 58;

 private:
  using Clock = SocketMesh::Clock;
  // How long a rank waits for the hub's answer past its own deadline, and the hub for its
  // answers to go out on a failure.
  static constexpr std::chrono::milliseconds kVerdictGrace{1000};
  // How long a wait with a passive receive leaves it alone at most (eager_through_hub).
  static constexpr std::chrono::milliseconds kPassiveSlice{10};
  // How many non-blocking looks a hub that roots takes at most at what its peers sent (drain).
  static constexpr int kDrainLooks = 4;
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
  // `enough`: done early once it holds (what is not done is the caller's to abandon).
  void progress(const Sends& sends, const Recvs& recvs, Clock::time_point deadline,
                const std::function<void()>& on_read = {}, const std::function<bool()>& enough = {});
  // Throws naming the sender of a message of another size than its receive's.
  void check_sizes(const Recvs& recvs) const;
  // As progress, and check_sizes.
  // Reads no further than the posted receives: what a peer sends next waits in the socket
  // until its receive is posted, unless a send of ours stalls (SocketMesh::progress), when it
  // may be copied aside.
  void await(const Sends& sends, const Recvs& recvs, Clock::time_point deadline,
             const std::function<void()>& on_read = {});

  // Between two ranks: the peer's row (decoded into table_) against this rank's `mine` at a
  // meeting, throwing a disagreement that only an eager broadcast can cause (marking this rank
  // broken), or the mark that row carries.
  void check_peer_row(const Intent& mine);
  // The peer rooted `rooted` eager broadcasts, not the received_ this rank took from it.
  std::string roots_differ(CollectiveKind kind, uint64_t rooted) const;
  // Sets the mark (the first stays): global rank `by` found `why` at collective `at`.
  void mark(int by, uint64_t at, const std::string& why);
  // The broken group's error at the current collective.
  [[noreturn]] void raise_broken() const;
  // Raises the mark that `peer`'s row (decoded in table_) carries, taking it as this rank's; no
  // mark: nothing.
  void take_mark(int peer);
  // Rank r's row is not of this group's form: refused (with a hang-up between two ranks, where
  // no verdict goes back).
  [[noreturn]] void refuse_row(int r, bool hang_up);
  // Abandons the rows of a collective that failed between its meeting and its first phase.
  void drop_unsettled();
  // This exchange's row from rank r, into its slot (at most a slot's bytes).
  std::shared_ptr<SocketMesh::Recv> receive_row(int r);
  // A row of `bytes` at `row` for `exchange`.
  static std::shared_ptr<SocketMesh::Send> send_row(uint64_t exchange, const char* row, size_t bytes);
  // Sends this rank's marked row to every peer for `exchange` (once per exchange) and leaves it
  // to go out on later progress (a lost peer is not this call's error).
  void send_mark(Clock::time_point deadline, uint64_t exchange);

  // Whether two broadcasts' intents agree in what check_agreement compares of them.
  static bool same_broadcast(const Intent& a, const Intent& b);
  // The pair's disagreement (this rank's `mine` against rank r's `theirs`) as check_agreement
  // states it, else `otherwise`.
  std::string against(const Intent& mine, const Intent& theirs, int r, const std::string& otherwise) const;

  // Through the hub (groups of 3 to 16):
  // The flags of the row that came from rank r into its slot (0 if not a whole row).
  uint64_t flagged(const SocketMesh::Recv& row, int r);
  // This rank found `why` at the current collective: marks it, drops the collective's phase
  // messages, sends its marked row to every peer for this exchange and the next (a peer that
  // has returned reads the next), and throws the mismatch.
  [[noreturn]] void found(const std::string& why, Clock::time_point deadline);
  // Takes the mark a peer's row `theirs` states (its text at `text`), passes it on as found
  // does, raises it.
  [[noreturn]] void adopt(const Intent& theirs, const char* text, Clock::time_point deadline);
  // Sends this rank's marked row to every peer for this exchange and the next (a peer that has
  // returned reads the next).
  void spread_mark(Clock::time_point deadline);
  // Rank `other`'s digest of eager broadcasts is not this rank's.
  std::string digests_differ(CollectiveKind kind, int other) const;
  // At the hub, on the rows in: a marked, eager or receiver's row, or a digest unlike the hub's.
  void check_hub_rows(const Recvs& in, Clock::time_point deadline);
  // Elsewhere, at a meeting: a marked or eager row from the hub in its answer's place.
  void check_answer(const SocketMesh::Recv& answer, Clock::time_point deadline);
  // An eager broadcast in a group of 3 to 16 (see above).
  void eager_through_hub(Intent mine, void* data, Clock::time_point deadline);
  // At a receiver of it, on the rows `in` that came: a marked row, the root's unlike `mine`,
  // another rank's that is not a receiver's like this rank's.
  void check_eager_rows(const Intent& mine, const Recvs& in, Clock::time_point deadline);
  // At the hub, as an eager root, before its rows go: a few polls (kDrainLooks), waiting for
  // nothing, that take a peer's mark for this exchange (adopted: the mark goes in place of the
  // rows) and read and drop what came for earlier ones.
  void drain(Clock::time_point deadline);

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
  std::vector<char> answer_;     // every rank's row, as the hub sends it and the others receive it
  size_t answer_bytes_ = 0;      // the answer's size (answer_ also holds a marked or eager row)
  std::exception_ptr row_lost_;  // off the hub: this collective's row could not go to the hub
  std::vector<bool> owed_;       // at the hub: peers not yet sent this collective's answer
  char* base_ = nullptr;         // what this rank exposes
  uint64_t extent_ = 0;
  std::vector<char> scratch_;  // pieces folded in parts land here, kept across calls
  // Between two ranks: eager broadcasts this rank rooted and received; the group's mark.
  uint64_t rooted_ = 0, received_ = 0;
  // Through the hub: a digest of the group's eager broadcasts (each one's number and root).
  uint64_t digest_ = 0;
  bool broken_ = false;
  int broken_by_ = -1;
  uint64_t broken_at_ = 0;
  std::string broken_why_;
  std::vector<uint64_t> mark_row_;  // the marked row as sent, 8-byte aligned
  uint64_t marked_through_ = 0;     // the last exchange a marked row went out for
};

}  // namespace distrun
