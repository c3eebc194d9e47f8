// The connections of one group over plain TCP sockets, made on first use, and the messages that
// move over them: what socket_path.hpp (the collectives' blocks) and point-to-point traffic share.
//
// Each process listens on one socket (socket_listener.hpp, shared by its groups bound to the
// same address; the address published in each group's store once the group is registered
// there) and a rank connects to a peer only when an operation first names it: the lower rank
// of a pair connects and proves, in its hello, a key derived from the workers' secret and the
// group's id; the listener drops strangers, replays and wrong ranks without a wait, and the
// acceptor's answer, read before the connection's first message, proves the key back. A ring
// opens two connections per rank, not n - 1.
//
// Every message is a header (kind, key, bytes) and its bytes. The messages queued on a
// connection go out together, in one sendmsg (a point-to-point statement and its payload, one
// TCP segment); a read takes a header with whatever follows it, up to 16 KiB, so that a small
// message (or several) costs one recv, and a large one's bytes past its first 16 KiB go
// straight into the receiver's buffers. Bytes read ahead are the socket's, kept in user space:
// a message among them is taken only when a wait would have read it from the socket, as one
// still there, and before any poll (a wait finds it without a system call). All
// I/O happens in the calling thread: the waits poll() the sockets with the call's deadline, and
// any wait moves every posted operation on, so `isend; recv; wait` on both ends of a pair, or a
// ring's `isend; irecv; wait; wait`, cannot deadlock. A connection is read while a receive is
// posted on it or a send of ours waits on it (outside `posted_only` waits, one where a passive
// receive stands, such as a point-to-point refusal's, is read when that receive takes its
// next message, looked at with MSG_PEEK), and every connection once a send of ours has
// moved nothing for 20 ms: a message found there before its receive is posted is kept aside
// until it is, so large blocking sends posted around a cycle before any of their receives
// (MPI's "unsafe" pattern) complete, at the cost of a copy and that pause.
//
// A send is done once written, its bytes perhaps still in the kernel: the mesh's teardown shuts
// each connection with bytes unacknowledged for writing and reads (dropping) what comes until
// its peer has acknowledged them, 2 s at most, since closing a socket with unread input resets
// the connection and drops what it still had to send.
#pragma once
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <list>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "distrun/core/error.hpp"
#include "distrun/host/paths/socket_listener.hpp"
#include "distrun/store/store.hpp"

namespace distrun {

/// "2, 5": ranks as an error names them.
inline std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

/// A peer's words, to be printed: every byte outside printable ASCII becomes '?'.
inline std::string printable(std::string text) {
  for (char& ch : text)
    if (ch < ' ' || ch > '~') ch = '?';
  return text;
}

/// A connection cut for good, saying why (SocketMesh::cut): this rank hung up on `peer()`, or
/// `peer()` hung up on this rank. Raised by the operations with that peer that a wait needs, and
/// by every later one; `peer()` is the other end's global rank, `reason()` the text the rank
/// that cut wrote, which names the rank it found at fault ("rank 1 sent ..."). A PeerError, so
/// that a backend passes it on unchanged.
class CutError : public PeerError {
 public:
  CutError(int peer, std::string reason, const std::string& what) : PeerError(peer, what), reason_(std::move(reason)) {}
  const std::string& reason() const { return reason_; }

 private:
  std::string reason_;
};

class SocketMesh {
 public:
  using Clock = std::chrono::steady_clock;
  /// Cut: the last message of a peer that hangs up on this rank (cut), saying why. Notice: a
  /// peer's word that it reads nothing more of what this rank sends (give_notice).
  enum class Kind : uint32_t { Intent = 1, Phase, Confirm, Message, Statement, Refusal, Cut, Notice };
  /// A message's identity on its connection: sender and receiver derive it alike.
  struct Key {
    Kind kind;
    uint64_t key;
    bool operator==(const Key& o) const { return kind == o.kind && key == o.key; }
  };
  /// A posted receive: `bytes` of the message land in `parts` in order; `got` grows as they do.
  struct Recv {
    Key key{};
    std::vector<std::pair<char*, size_t>> parts;
    size_t bytes = 0;  // what the receiver expects (set by post: the parts' sum)
    size_t got = 0;
    // Any message of at most `bytes` fits; `bytes` becomes its size (an intent with a
    // buffer of any size up to the eager limit).
    bool at_most = false;
    // A standing receive for a message that may never come (a point-to-point refusal): taken
    // when it arrives on a connection read anyway, and looked for by waits that are not
    // `posted_only` (the connection read when this is its next message), but never why a
    // wait goes on, why a peer's close is an error, or whom a timeout names.
    bool passive = false;
    bool done = false;
    // The sender's stated size when it differs from `bytes` (its bytes were read and dropped).
    bool differs = false;
    uint64_t stated = 0;
  };
  /// A posted send of `bytes` in `parts` (header added by the mesh); done once all are written.
  struct Send {
    Key key{};
    std::vector<std::pair<const char*, size_t>> parts;
    bool done = false;
    std::string failed;  // why it never went (its peer lost), set with `done`: raise_failed
    bool cut = false;    // its connection was cut: `failed` is raised as a CutError
    // Filled by the mesh: the header and the write position.
    uint64_t header[3]{};
    size_t total = 0, sent = 0;
    std::vector<char> own;  // the bytes, once detached from the caller's buffers
  };

  /// Listens on `address` (a resolved local address, port ignored; the process's listener
  /// there), publishes where in `store`, with the group's id (and, without `secret`, the key's
  /// input). `secret` is the workers' secret; `global_ranks` name the peers in errors.
  SocketMesh(std::shared_ptr<Store> store, int rank, int size, const sockaddr_storage& address,
             std::vector<int> global_ranks, const std::string& secret = "");
  ~SocketMesh();
  SocketMesh(const SocketMesh&) = delete;
  SocketMesh& operator=(const SocketMesh&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  /// Connections this rank has made or accepted so far: for logs and the scale measurements.
  int connections() const { return opened_; }
  /// The times a wait has polled this group's sockets: each a system call.
  uint64_t polls() const { return polls_; }
  /// Whether the connection to `peer` is open: a post to it neither connects first nor fails.
  bool connected(int peer) const { return conns_[size_t(peer)].fd >= 0 && conns_[size_t(peer)].lost.empty(); }

  /// Posts `op` to `peer`, connecting first if this rank is the pair's connector, and writes
  /// what the socket takes at once unless `more` (another message to `peer` follows at once:
  /// they go out in one write). The op (and its buffers) must live until it is done or the
  /// mesh is gone.
  void post(int peer, const std::shared_ptr<Send>& op, Clock::time_point deadline, bool more = false);
  /// A send done because its peer was lost (`Send::failed`) raises that, naming the peer; a
  /// wait's owner calls it on its sends once they are done.
  void raise_failed(int peer, const Send& op) const;
  void post(int peer, const std::shared_ptr<Recv>& op, Clock::time_point deadline);
  /// Moves every posted operation on until `done()` holds, calling `on_read` (if any) after
  /// bytes arrive; at `deadline` a TimeoutError naming the ranks `late()` gives (the group
  /// ranks whose messages this wait still needs; without it, every peer with an operation
  /// pending), a BackendError naming a peer whose connection ended with a receive of ours
  /// posted on it (a CutError where it was cut), once `late()` names that peer (without it, at
  /// once): a wait on other peers goes on, and that receive's own wait raises. `posted_only`: read a
  /// connection only up to the end of its last posted receive, even where our sends wait on it
  /// (a caller that posts the next receives once these are in, and so would rather not find
  /// their messages copied aside). Once a send of
  /// ours has moved nothing for 20 ms, every connection is read whatever `posted_only`
  /// says (its peer may be blocked sending to us: a cycle of blocking sends), and what arrives
  /// before its receive is copied aside. `or_return`: at `deadline` return false instead of
  /// raising the TimeoutError (a peer's notice is raised all the same): a wait cut into slices,
  /// or one poll that takes only what has come (a deadline already past). True once `done()`.
  /// `moved_at`: when this group's sockets last had something for us, carried from one slice
  /// of a wait to the next, so that a sliced wait whose send stalls still reads every
  /// connection after 20 ms (without it, the wait's start).
  bool progress(const std::function<bool()>& done, Clock::time_point deadline,
                const std::function<void()>& on_read = {}, bool posted_only = false,
                const std::function<std::vector<int>()>& late = {}, bool or_return = false,
                Clock::time_point* moved_at = nullptr);
  /// Bytes `peer` sent that this rank has yet to read: in its socket and read ahead (tests: a
  /// rank that reads nothing must not leave its peers' messages piling up unread).
  size_t unread(int peer) const;
  /// Gives `op` (posted to `peer`, not yet written whole) a copy of its bytes, so that it is
  /// written on later progress after its caller's buffers are gone: a message already begun
  /// cannot be taken back without losing the stream's framing.
  void detach(const std::shared_ptr<Send>& op);
  /// Messages of `kind` with a key below `key` will never be received: drops those kept
  /// aside and those still to arrive (read and dropped, never copied aside).
  void discard_below(Kind kind, uint64_t key);
  /// Messages kept aside for a receive not yet posted (tests: a stale one must not stay).
  size_t stashed() const;
  /// Forgets an operation that will not be waited for (its caller failed): its buffers may go.
  /// A send cut off mid-message closes its connection for good (the stream has lost its
  /// framing, and the listener lets a pair in once): later operations with that peer fail. A
  /// detached one stays queued. A write that fails or a connection that ends with no receive of
  /// ours pending (its peer gone) fails what was queued on it (each send done with `failed`,
  /// raised by its own wait: `raise_failed`) and later sends to that peer; after a failed write
  /// its receives still take what the peer sent before it left. Other peers' operations go on.
  void abandon(int peer, const std::shared_ptr<Send>& op);
  void abandon(int peer, const std::shared_ptr<Recv>& op);
  /// Closes the connection to `peer` for good, dropping what was queued for it and its unread
  /// input: it sent what no rank of this build sends. Here its queued sends fail, a wait that
  /// needs a receive still posted on it raises CutError "rank <peer> " + `why` at once, and so
  /// do later operations with it; waits on other peers go on. Its own waits on this rank end at
  /// once: before hanging up, unless a message to it is half written or its socket is full,
  /// this rank writes it that text as a last message, which it raises as CutError "rank <this
  /// rank> hung up on this rank: rank <peer> " + `why`, under the same rule, and so does a
  /// write of its that fails on the reset before it read that message (looked for among what
  /// it has yet to read, 1 MiB at most; past that, or where it could not be written, the peer
  /// says that it closed or lost its connection).
  void cut(int peer, const std::string& why);
  /// Tells `peer` that this rank will read nothing more of what it sends (`why`: its group is
  /// broken), behind what is queued for it, the connection left open. `peer` keeps that word
  /// when a wait of its reads the connection (any wait does once a send of its has stalled), and
  /// a wait of its that times out on a collective's row to this rank raises it (a point-to-point
  /// send still times out), as CollectiveMismatchError
  /// "rank <this rank> reads nothing more of what this rank sends (" + `why` + ")", instead of
  /// a TimeoutError: an eager broadcast's root, which reads nothing, whose receiver found a
  /// disagreement and stopped, learns why once its socket fills. Nothing where the connection is
  /// not open.
  void give_notice(int peer, const std::string& why);

 private:
  struct Stashed {
    Key key;
    std::vector<char> bytes;
  };
  struct Conn {
    int fd = -1;
    std::deque<std::shared_ptr<Send>> sends;
    std::vector<std::shared_ptr<Recv>> recvs;  // posted, not yet matched
    std::list<Stashed> stash;                  // arrived before their receive
    bool gone = false;                         // the peer closed it between operations
    // What later operations with the peer say once the connection is lost: this rank cut it
    // (a send cut off mid-message), a write failed (receives still take what is in the socket),
    // or a read failed between messages.
    std::string lost;
    // Where the connection was cut (by either end): the cutter's text, raised as a CutError.
    std::string reason;
    bool cut() const { return !reason.empty(); }
    std::string notice;  // the peer's word that it reads nothing more of ours (give_notice)
    bool full = false;   // the last write found the socket full
    // Bytes read past the message in hand: [ahead_at, ahead_end) of `ahead`, read first.
    std::unique_ptr<char[]> ahead;
    size_t ahead_at = 0, ahead_end = 0;
    // The message being read: its header, then its bytes into `into` (or `dropped` bytes).
    uint64_t header[3]{};
    size_t header_got = 0;
    std::shared_ptr<Recv> into;
    Stashed* stashing = nullptr;
    uint64_t dropping = 0;
    // On a connection this rank made: the answer the acceptor must give first, and what came.
    std::string expect;
    char answer[pair_auth::kProofBytes]{};
    size_t answer_got = 0;
    bool opened = false;  // a connection was made once: never again (a replay is not let in)
    // A receive other than a passive one is posted.
    bool receiving() const {
      return std::any_of(recvs.begin(), recvs.end(), [](const auto& r) { return !r->passive; });
    }
    bool standing() const {
      return std::any_of(recvs.begin(), recvs.end(), [](const auto& r) { return r->passive; });
    }
  };
  void connect_to(int peer, Clock::time_point deadline);
  // Takes the connections the listener let in for this rank.
  void take_accepted();
  // Reads the acceptor's answer on `peer`'s connection; false while it is incomplete.
  bool read_answer(int peer);
  bool write_some(int peer);
  // The peer is lost (`why`): every send queued for it is done, failed, for its own wait to raise.
  void drop_sends(Conn& c, const std::string& why);
  bool read_some(int peer, bool posted_only = false);
  // Whether a passive receive takes `peer`'s next message (or it is the connection's end or
  // error, which read_some reports), looked at without taking it.
  bool passive_next(int peer);
  // Reads into `iov` (`k` entries, room for one more) from the bytes read ahead, or else from
  // the socket, with up to 16 KiB more into the read-ahead when `iov` holds the `whole` rest of
  // the message in hand; as readv, the bytes that landed in `iov`.
  ssize_t fill(Conn& c, iovec* iov, int k, bool whole);
  void start_message(int peer);
  // The last stashed message of `c` (a cut's or a notice's words), taken out as printable text.
  static std::string take_text(Conn& c);
  // The message just read from `peer` is its cut's text: the connection ends, saying so.
  void hung_up(int peer);
  // The text of a cut that `peer` wrote and this rank has yet to read, looked for (never taken)
  // among the bytes read ahead and the socket's first kDrainBytes; empty where none is there.
  std::string pending_cut(int peer) const;
  // The end of `peer`'s connection, found by a read (`what`): what it queued fails, and so do
  // later operations with it and a wait that needs a receive posted on it (progress).
  void lose(int peer, const std::string& what);
  [[noreturn]] void fail_peer(int peer, const std::string& what, bool cut = false) const;
  int global(int r) const;

  static void deliver(const Stashed& m, Recv& r);
  void close_conn(Conn& c);

  std::shared_ptr<Store> store_;
  int rank_, size_;
  std::vector<int> global_ranks_;
  std::vector<Conn> conns_;
  std::shared_ptr<SocketListener> listener_;
  std::string group_, key_;  // the group's id (from the store) and key (never sent)
  int opened_ = 0;
  uint64_t polls_ = 0;
  struct {
    std::vector<pollfd> fds;
    std::vector<int> peer_of;
    std::vector<bool> for_passive;    // per fd: read only should a passive receive take its next message
    std::vector<int> not_passive;     // connections whose next message is another's: not read here
  } wait_;                            // progress()'s, kept across waits
  uint64_t taken_at_ = ~uint64_t(0);  // the listener's let_in() when take_accepted last took
  // Per Kind: keys below it are dropped on arrival (discard_below). A header's kind is whatever
  // its sender wrote: it is masked into the table, which holds every kind of this build apart.
  static constexpr uint32_t kFloors = 16;
  static_assert(uint32_t(Kind::Notice) < kFloors, "every kind has a floor of its own");
  uint64_t floor_[kFloors]{};
  uint64_t& floor_of(Kind kind) { return floor_[uint32_t(kind) % kFloors]; }
};

}  // namespace distrun
