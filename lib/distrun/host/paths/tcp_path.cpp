#include "distrun/host/paths/tcp_path.hpp"

#include <gloo/allgather.h>
#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "distrun/core/error.hpp"
#include "distrun/host/path_policy.hpp"

namespace distrun {

namespace {

// Gloo slots of the phases: this prefix, the collective's tag, the phase (point-to-point
// messages use slots of their own, GlooBackend::p2p_slot); of the intent exchanges: this
// prefix and the exchange's number.
constexpr uint64_t kPhaseSlot = 0x4e5c000000000000ull;
constexpr uint64_t kIntentSlot = 0x4e5d000000000000ull;
constexpr uint64_t kConfirmSlot = 0x4e5e000000000000ull;
// A piece moves in segments of this size, so that the reader folds one in while the next
// arrives (and Gloo never holds a whole large piece in one message).
constexpr size_t kSegment = size_t(1) << 20;

void require(bool ok, std::chrono::milliseconds timeout) {
  if (!ok) throw TimeoutError("timed out after " + std::to_string(timeout.count()) + " ms");
}

}  // namespace

void allgather_intents(const std::shared_ptr<gloo::Context>& context, uint32_t tag, std::chrono::milliseconds timeout,
                       const Intent& mine, std::vector<Intent>& table) {
  const int n = int(table.size());
  const size_t words = Intent::words(n);
  std::vector<uint64_t> row(words, 0), all(words * size_t(n));
  mine.encode(row.data(), n);
  gloo::AllgatherOptions o(context);
  o.setInput(row.data(), words);
  o.setOutput(all.data(), all.size());
  o.setTag(tag);
  o.setTimeout(timeout);
  gloo::allgather(o);
  for (int r = 0; r < n; ++r) Intent::decode(all.data() + words * size_t(r), n, table[size_t(r)]);
}

TcpPath::TcpPath(std::shared_ptr<gloo::Context> context, int rank, int size, std::vector<int> global_ranks,
                 std::function<uint32_t()> next_tag)
    : context_(std::move(context)), rank_(rank), size_(size), global_ranks_(std::move(global_ranks)),
      next_tag_(std::move(next_tag)) {
  row_bytes_ = Intent::words(size_) * sizeof(uint64_t);
  eager_ = eager_bytes(size_);
  stride_ = row_bytes_ + eager_;
  for (Inbox& box : inbox_) {
    box.words.assign(stride_ / sizeof(uint64_t) * size_t(size_), 0);
    box.in = context_->createUnboundBuffer(box.words.data(), stride_ * size_t(size_));
    box.out = context_->createUnboundBuffer(box.words.data(), stride_ * size_t(size_));
  }
  post_intent_receives();
}

TcpPath::~TcpPath() = default;

void TcpPath::post_intent_receives(bool again) {
  const uint64_t exchange = exchanges_ + 1;
  Inbox& box = inbox_[exchange % 2];
  auto post = [&](int r) { box.in->recv(r, kIntentSlot | exchange, stride_ * size_t(r), stride_); };
  if (again) {
    // Now the pair's error, if it still has one, is this collective's.
    for (int r : unposted_) post(r);
    unposted_.clear();
    return;
  }
  // A peer may have finished its last collective and closed its pairs already (this one ended
  // for it with our intent): a receive that cannot be posted waits for the next meeting.
  for (int r = 0; r < size_; ++r) try {
      if (r != rank_) post(r);
    } catch (const std::exception&) {
      unposted_.push_back(r);
    }
}

const std::vector<Intent>& TcpPath::meet(Intent intent, const void* base, uint64_t extent,
                                         std::chrono::milliseconds timeout) {
  base_ = static_cast<char*>(const_cast<void*>(base));
  extent_ = base ? extent : 0;
  eager_in_ = nullptr;
  intent.seq = ++seq_;
  table_.assign(size_t(size_), intent);
  // Every member skips alike (same flags, same tags). all_to_all's intents differ by rank, so
  // they always travel.
  if (!(intent.flags & Intent::kAgreed) || intent.kind == CollectiveKind::AllToAll) {
    if (!unposted_.empty()) post_intent_receives(true);
    const uint64_t slot = kIntentSlot | ++exchanges_;
    Inbox& box = inbox_[exchanges_ % 2];
    const size_t sent = write_row(intent, size_, box.slot(stride_, rank_), row_bytes_, base_, extent_, eager_);
    for (int r = 0; r < size_; ++r)
      if (r != rank_) box.out->send(r, slot, stride_ * size_t(rank_), sent);
    for (int r = 1; r < size_; ++r) require(box.in->waitRecv(nullptr, timeout), timeout);
    for (int r = 1; r < size_; ++r) require(box.out->waitSend(nullptr, timeout), timeout);
    for (int r = 0; r < size_; ++r)
      Intent::decode(reinterpret_cast<const uint64_t*>(box.slot(stride_, r)), size_, table_[size_t(r)]);
    // The next exchange's receives go out before the check: a disagreement leaves the group
    // usable, and every rank posts them alike.
    post_intent_receives();
    try {
      check_agreement(table_, false, global_ranks_);
    } catch (const CollectiveMismatchError&) {
      confirm_rows_read(timeout);
      throw;
    }
    eager_in_ = &box;
  }
  tag_ = next_tag_();
  return table_;
}

void TcpPath::confirm_rows_read(std::chrono::milliseconds timeout) noexcept {
  try {
    const uint64_t slot = kConfirmSlot | exchanges_;
    std::vector<char> notes(size_t(size_), 0);
    auto in = context_->createUnboundBuffer(notes.data(), notes.size());
    char note = 1;
    auto out = context_->createUnboundBuffer(&note, 1);
    for (int r = 0; r < size_; ++r)
      if (r != rank_) {
        in->recv(r, slot, size_t(r), 1);
        out->send(r, slot, 0, 1);
      }
    for (int r = 1; r < size_; ++r)
      if (!in->waitRecv(nullptr, timeout) || !out->waitSend(nullptr, timeout)) return;
  } catch (const std::exception&) {
    // A peer that already closed had read our row: its note is all that was lost.
  }
}

void TcpPath::run(Schedule& schedule, int phase, std::chrono::milliseconds timeout) {
  if (phase >= 1 << 16) throw BackendError("a collective of more than 65536 phases");
  const uint64_t slot = kPhaseSlot | uint64_t(tag_) << 16 | uint64_t(phase);
  // Phase 0 sees every buffer as it was at the meeting: an eager sender's bytes came with its
  // intent, and it sends nothing now.
  auto eager = [&](int r) { return phase == 0 && eager_in_ && (table_[size_t(r)].flags & Intent::kInline); };
  // What we take, in order; pieces folded in parts land in scratch, one after another.
  std::vector<Piece> mine;
  size_t folded = 0;
  schedule.pieces(phase, rank_, [&](const Piece& p) {
    if (eager(p.peer)) {
      const Intent& from = table_[size_t(p.peer)];
      check_piece(global_ranks_, rank_, p.peer, p, std::min<uint64_t>(from.extent, eager_));
    } else if (!p.dst) {
      folded += p.bytes;
    }
    mine.push_back(p);
  });
  if (scratch_.size() < folded) scratch_.resize(folded);
  // What every reader takes from us, in its order: the schedule is the same function of the
  // same intents on every rank. Checked against what we exposed before anything is posted.
  struct Send {
    int reader;
    uint64_t offset;
    size_t bytes;
  };
  std::vector<Send> sends;
  for (int reader = 0; reader < size_; ++reader) {
    if (reader == rank_) continue;
    schedule.pieces(phase, reader, [&](const Piece& p) {
      if (p.peer != rank_) return;
      check_piece(global_ranks_, reader, rank_, p, extent_);
      if (!eager(rank_)) sends.push_back(Send{reader, p.offset, p.bytes});
    });
  }
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> recvs(mine.size());
  size_t at = 0;
  for (size_t i = 0; i < mine.size(); ++i) {
    const Piece& p = mine[i];
    if (eager(p.peer)) continue;
    char* into = p.dst ? p.dst : scratch_.data() + at;
    if (!p.dst) at += p.bytes;
    recvs[i] = context_->createUnboundBuffer(into, p.bytes);
    for (size_t off = 0; off < p.bytes; off += kSegment)
      recvs[i]->recv(p.peer, slot, off, std::min(kSegment, p.bytes - off));
  }
  std::unique_ptr<gloo::transport::UnboundBuffer> exposed;
  int segments = 0;
  if (!sends.empty()) exposed = context_->createUnboundBuffer(base_, extent_);
  for (const Send& s : sends)
    for (size_t off = 0; off < s.bytes; off += kSegment, ++segments)
      exposed->send(s.reader, slot, s.offset + off, std::min(kSegment, s.bytes - off));
  at = 0;
  for (size_t i = 0; i < mine.size(); ++i) {
    const Piece& p = mine[i];
    if (!recvs[i]) {
      const char* from = eager_in_->slot(stride_, p.peer) + row_bytes_ + p.offset;
      if (p.dst)
        std::memcpy(p.dst, from, p.bytes);
      else
        schedule.take(p, 0, from, p.bytes);
      continue;
    }
    for (size_t off = 0; off < p.bytes; off += kSegment) {
      require(recvs[i]->waitRecv(nullptr, timeout), timeout);
      if (!p.dst) schedule.take(p, off, scratch_.data() + at + off, std::min(kSegment, p.bytes - off));
    }
    if (!p.dst) at += p.bytes;
  }
  for (int k = 0; k < segments; ++k) require(exposed->waitSend(nullptr, timeout), timeout);
}

namespace {

// Gloo's pairs (DISTRUN_TCP=gloo), for comparison: a full mesh connected when the group is made.
[[maybe_unused]] const bool registered =
    register_path({"gloo", PathEntry::Hosts, 1, [](const PathGroup& g) {
                     return std::make_unique<TcpPath>(g.gloo(), g.rank, g.size, g.global_ranks, g.next_tag);
                   }});

}  // namespace

}  // namespace distrun
