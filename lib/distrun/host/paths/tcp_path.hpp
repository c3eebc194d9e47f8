// The path over Gloo's TCP pairs, where DISTRUN_TCP=gloo picks it instead of distrun's sockets
// (socket_path.hpp), for comparison (see path.hpp for the model). A rank cannot read a peer's
// memory here, so in each phase it lists what every reader takes from it and sends that, while
// receiving its own pieces; pieces go in segments, so folding one segment in overlaps receiving
// the next.
//
// The intent check is one message to and from every peer before each collective, into
// receives posted at the end of the collective before: a Gloo message moves at once when its
// receive is already posted, where otherwise the two sides first trade "send ready" and
// "receive ready" notes (a round trip and wake-ups of both sides' threads). A rank whose
// exposed buffer is small (up to 64 KiB, the direct algorithms' limit on TCP; less in groups
// of more than 16, where each rank holds two slots per peer) sends it with its intent, so a small
// collective's first phase is served from what the check brought: one message each way in
// all, where a phase of its own would add a rendezvous. The receiver takes those bytes only
// once every intent agrees, and never past the extent the sender stated.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "distrun/host/path.hpp"

namespace gloo {
class Context;
namespace transport {
class UnboundBuffer;
}
}  // namespace gloo

namespace distrun {

/// Every member's intent into `table` (sized to the group), in rank order, through one Gloo
/// all_gather under `tag`: how shared memory without a segment meets (TcpPath sends its rows
/// to every peer into receives posted in advance).
void allgather_intents(const std::shared_ptr<gloo::Context>& context, uint32_t tag, std::chrono::milliseconds timeout,
                       const Intent& mine, std::vector<Intent>& table);

class TcpPath : public Path {
 public:
  /// `next_tag` gives the Gloo tag of each meeting and phase.
  TcpPath(std::shared_ptr<gloo::Context> context, int rank, int size, std::vector<int> global_ranks,
          std::function<uint32_t()> next_tag);
  ~TcpPath() override;

  std::string name() const override { return "tcp"; }
  bool reads_peers() const override { return false; }
  /// Every rank's intent, checked before a byte moves: Gloo itself would notice a size
  /// disagreement only deep in a pair's receive (an abort, or a timeout on the other side). An
  /// intent marked kAgreed (the hierarchical path checked the whole group already) skips the
  /// round trip.
  const std::vector<Intent>& meet(Intent intent, const void* base, uint64_t extent,
                                  std::chrono::milliseconds timeout) override;
  void run(Schedule& schedule, int phase, std::chrono::milliseconds timeout) override;
  /// Nothing to wait for: every phase waited for its sends.
  void finish(std::chrono::milliseconds) override {}

 private:
  // One exchange's intents: a slot of `stride_` bytes per rank, its row and then up to eager_
  // bytes of its exposed buffer (ours: what we send). Two, used by turns, so that the next
  // exchange's receives are posted while this collective still reads this one's.
  struct Inbox {
    std::vector<uint64_t> words;  // 8-byte aligned rows
    std::unique_ptr<gloo::transport::UnboundBuffer> in, out;
    char* slot(size_t stride, int r) { return reinterpret_cast<char*>(words.data()) + stride * size_t(r); }
  };
  std::shared_ptr<gloo::Context> context_;
  int rank_, size_;
  std::vector<int> global_ranks_;
  std::function<uint32_t()> next_tag_;
  // Posts the receives of every peer's intent in exchange number `exchanges_ + 1`; `again`:
  // those of unposted_ only.
  void post_intent_receives(bool again = false);
  std::vector<int> unposted_;  // peers whose receive of the next exchange is not posted yet
  // After a disagreement, before the error leaves: one note to and from every peer. Every rank
  // finds the same disagreement in the same rows, but one that throws and closes its pairs at
  // once can reset a connection whose peer has not yet read that rank's row, and the peer
  // would report a lost connection instead of the disagreement. A peer's note arrives after its
  // row on the same connection, and a peer sends its note only once it has read ours. Best
  // effort: the rows are already here, so nothing a peer does now can change this rank's error.
  void confirm_rows_read(std::chrono::milliseconds timeout) noexcept;
  uint64_t seq_ = 0;
  uint64_t exchanges_ = 0;                         // intent exchanges so far (collectives marked kAgreed skip them)
  size_t row_bytes_ = 0, eager_ = 0, stride_ = 0;  // eager_: the most bytes sent with an intent
  Inbox inbox_[2];
  Inbox* eager_in_ = nullptr;  // this collective's exchange, whose eager bytes serve phase 0
  uint32_t tag_ = 0;           // this collective's, for the slots of its phases
  std::vector<Intent> table_;
  char* base_ = nullptr;  // what this rank exposes
  uint64_t extent_ = 0;
  std::vector<char> scratch_;  // pieces folded in parts land here, kept across calls
};

}  // namespace distrun
