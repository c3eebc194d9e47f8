#include "distrun/host/paths/socket_path.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "distrun/core/error.hpp"
#include "distrun/host/path_policy.hpp"

namespace distrun {

namespace {

using Send = SocketMesh::Send;
using Recv = SocketMesh::Recv;
using Kind = SocketMesh::Kind;

// A piece being folded is handed to the schedule in parts of this many bytes (a multiple of
// every element size) as they arrive, so that folding overlaps receiving.
constexpr size_t kFoldPart = size_t(64) << 10;

// Rank r's row among `in` (null when `in` has no receive from r: this rank's own row).
const Recv* row_from(const std::vector<std::pair<int, std::shared_ptr<Recv>>>& in, int r) {
  for (const auto& [peer, row] : in)
    if (peer == r) return row.get();
  return nullptr;
}

}  // namespace

SocketPath::SocketPath(std::shared_ptr<SocketMesh> mesh, std::vector<int> global_ranks)
    : mesh_(std::move(mesh)), rank_(mesh_->rank()), size_(mesh_->size()), global_ranks_(std::move(global_ranks)) {
  row_bytes_ = Intent::words(size_) * sizeof(uint64_t);
  if (size_ <= kDirectCheckMost) eager_ = eager_bytes(size_);
  if (size_ >= kHubCheckLeast && size_ <= kDirectCheckMost) hub_ = 0;
  stride_ = row_bytes_ + eager_;
  inbox_.assign(stride_ / sizeof(uint64_t) * size_t(size_), 0);
  // The answer's receive also takes a row with bytes behind it in its place: the hub's eager
  // broadcast's row or its marked row.
  answer_bytes_ = row_bytes_ * size_t(size_);
  if (hub_ >= 0) answer_.resize(std::max(answer_bytes_, stride_));
  owed_.assign(size_t(size_), false);
}

void SocketPath::progress(const Sends& sends, const Recvs& recvs, Clock::time_point deadline,
                          const std::function<void()>& on_read, const std::function<bool()>& enough) {
  auto done = [&] {
    return (std::all_of(sends.begin(), sends.end(), [](const auto& s) { return s.second->done; }) &&
            std::all_of(recvs.begin(), recvs.end(), [](const auto& r) { return r.second->done; })) ||
           (enough && enough());
  };
  try {
    // Nothing left to wait for (a phase this rank has no part in, sends written whole as they
    // were posted, a message taken from the stash by its receive's post): no wait at all.
    if (!done())
      mesh_->progress(done, deadline, on_read, true,
                      [&] {  // the peers of what is not done: a peer's message, or its reading ours
                        std::vector<int> late;
                        for (const auto& [peer, op] : sends)
                          if (!op->done) late.push_back(peer);
                        for (const auto& [peer, op] : recvs)
                          if (!op->done) late.push_back(peer);
                        std::sort(late.begin(), late.end());
                        late.erase(std::unique(late.begin(), late.end()), late.end());
                        return late;
                      });
    for (const auto& [peer, s] : sends) mesh_->raise_failed(peer, *s);
  } catch (...) {
    for (const auto& [peer, s] : sends) mesh_->abandon(peer, s);
    for (const auto& [peer, r] : recvs) mesh_->abandon(peer, r);
    throw;
  }
}

void SocketPath::await(const Sends& sends, const Recvs& recvs, Clock::time_point deadline,
                       const std::function<void()>& on_read) {
  progress(sends, recvs, deadline, on_read);
  check_sizes(recvs);
}

void SocketPath::check_sizes(const Recvs& recvs) const {
  for (const auto& [peer, r] : recvs)
    if (r->differs)
      throw BackendError("rank " + std::to_string(global_rank_of(global_ranks_, peer)) + " sent " +
                         std::to_string(r->stated) + " bytes where the agreed schedule has " +
                         std::to_string(r->bytes));
}

bool SocketPath::well_formed(const Recv& row, int r) {
  if (row.differs || row.bytes < row_bytes_) return false;
  Intent::decode(reinterpret_cast<const uint64_t*>(slot(r)), size_, table_[size_t(r)]);
  const Intent& t = table_[size_t(r)];
  const bool carried = t.flags & Intent::kInline;
  // A mark's text and an eager broadcast's payload are read from behind the row: they must be
  // what it carries.
  if ((t.flags & (kBroken | kEager)) && !carried) return false;
  if ((t.flags & kEager) && t.extent != t.bytes) return false;
  return !(t.flags & (kLate | kMalformed)) && row.bytes - row_bytes_ == (carried ? t.extent : 0);
}

void SocketPath::post_rows(const Intent& intent, Clock::time_point deadline) {
  char* mine = slot(rank_);
  // The hub's row goes nowhere (its answer carries the row alone): no copy of its buffer.
  const size_t sent = write_row(intent, size_, mine, row_bytes_, rank_ == hub_ ? nullptr : base_, extent_, eager_);
  // Sized once for every peer (settle moves them out each collective): one allocation each.
  rows_.clear();
  rows_.reserve(size_t(size_));
  row_lost_ = nullptr;
  rows_out_.clear();
  // Directly, each peer's row comes from it and ours goes to it; through a hub, the hub gets
  // every peer's row and sends none, and a rank sends its row to the hub and gets its answer.
  auto talks_to = [&](int r) { return r != rank_ && (hub_ < 0 || rank_ == hub_ || r == hub_); };
  for (int r = 0; r < size_; ++r) {
    if (!talks_to(r)) continue;
    auto in = receive_row(r);
    if (answered()) in->parts = {{answer_.data(), answer_.size()}};
    rows_.emplace_back(r, in);
  }
  unsettled_ = true;
  try {
    for (auto& [r, in] : rows_) mesh_->post(r, in, deadline);
    for (int r = 0; r < size_ && rank_ != hub_; ++r) {
      if (!talks_to(r)) continue;
      auto out = send_row(exchanges_, mine, sent);
      if (!answered()) {
        rows_out_.emplace_back(r, out);
        mesh_->post(r, out, deadline);
        continue;
      }
      // A hub that has left may have sent its answer (a marked row) first: it is read before
      // the loss is raised.
      try {
        mesh_->post(r, out, deadline);
        rows_out_.emplace_back(r, out);
      } catch (const BackendError&) {
        row_lost_ = std::current_exception();
      }
    }
  } catch (...) {
    drop_unsettled();
    throw;
  }
}

uint64_t SocketPath::flagged(const Recv& row, int r) {
  if (!row.done || row.differs || row.bytes < row_bytes_) return 0;
  Intent t;
  Intent::decode(reinterpret_cast<const uint64_t*>(slot(r)), size_, t);
  return t.flags;
}

void SocketPath::settle(Clock::time_point deadline, const Sends& early) {
  if (!unsettled_) return;
  unsettled_ = false;
  const Sends out = std::move(rows_out_);
  const Recvs in = std::move(rows_);
  std::vector<bool> late(size_t(size_), false);
  // At the hub the wait ends early on what a disagreement with an eager broadcast sends: a
  // marked, eager or receiver's row (the rank that sent it may be all that comes). A malformed
  // one is left to the verdict, which waits for every row.
  auto enough = [&] {
    for (const auto& [r, row] : in)
      if ((flagged(*row, r) & (kEager | kBroken | kReceiver)) && well_formed(*row, r)) return true;
    return false;
  };
  try {
    // A rank waits for the hub's answer a little past its deadline, so that the hub's verdict
    // on a late rank (which the hub reaches at about the same deadline) comes first.
    // A row of another size than its slot's is read, dropped and refused below.
    progress(out, in, answered() ? deadline + kVerdictGrace : deadline, {},
             rank_ == hub_ ? std::function<bool()>(enough) : std::function<bool()>());
  } catch (const TimeoutError&) {
    if (rank_ != hub_) throw;
    for (const auto& [r, row] : in) late[size_t(r)] = !row->done;
    if (std::find(late.begin(), late.end(), true) == late.end()) throw;
  }
  if (hub_ >= 0) {
    try {
      if (rank_ == hub_) check_hub_rows(in, deadline);
      if (answered()) check_answer(*in.front().second, deadline);
      if (row_lost_) std::rethrow_exception(std::exchange(row_lost_, nullptr));
    } catch (...) {
      for (const auto& [peer, s] : early) mesh_->detach(s);
      for (const auto& [r, row] : in) mesh_->abandon(r, row);
      mesh_->discard_below(Kind::Phase, (seq_ + 1) << 16);
      throw;
    }
  }
  if (rank_ == hub_) {  // each row as it came, for every peer; a late or malformed one marked
    std::fill(owed_.begin(), owed_.end(), false);
    for (int r = 0; r < size_; ++r) {
      char* row = answer_.data() + row_bytes_ * size_t(r);
      const Recv* from = row_from(in, r);
      if (from && (late[size_t(r)] || !well_formed(*from, r))) {
        Intent mark;
        mark.flags = late[size_t(r)] ? kLate : kMalformed;
        mark.encode(reinterpret_cast<uint64_t*>(row), size_);
        table_[size_t(r)] = mark;
      } else {
        std::memcpy(row, slot(r), row_bytes_);
      }
      // A late rank is answered too where its connection is open (never connected to now),
      // so that once it comes it raises the same verdict, naming itself.
      owed_[size_t(r)] = r != rank_ && (!late[size_t(r)] || mesh_->connected(r));
    }
  }
  try {
    if (answered()) check_sizes(in);  // the hub's answer, of its one size
    std::vector<int> missing;
    for (int r = 0; r < size_; ++r) {
      // Each row is decoded once into table_ (this rank's own at the meeting): directly, each
      // peer's as it came (well_formed decodes it); through the hub, its answer, whose marks
      // name the same malformed rank on every rank, decoded by the hub as it judged each row.
      bool formed = true;
      if (hub_ < 0) {
        if (const Recv* from = row_from(in, r)) formed = well_formed(*from, r);
      } else {
        if (rank_ != hub_)
          Intent::decode(reinterpret_cast<const uint64_t*>(answer_.data() + row_bytes_ * size_t(r)), size_,
                         table_[size_t(r)]);
        formed = !(table_[size_t(r)].flags & kMalformed);
      }
      if (!formed) refuse_row(r, hub_ < 0);
      if (hub_ >= 0 && (table_[size_t(r)].flags & kLate)) missing.push_back(global_rank_of(global_ranks_, r));
    }
    // The hub's verdict, the same on every rank: naming the ranks it waited for in vain.
    if (!missing.empty())
      throw TimeoutError("timed out waiting for rank(s) " + rank_list(missing) +
                             " to state their intent at the hub (rank " +
                             std::to_string(global_rank_of(global_ranks_, hub_)) + ")",
                         missing);
    // Between two ranks an eager broadcast may stand against this meeting, or have done so.
    if (size_ == 2) check_peer_row(table_[size_t(rank_)]);
    // Every rank holds the same table, so every rank throws the same error; the connections
    // stay as they are (each peer's row was read whole), and the group stays usable.
    check_agreement(table_, false, global_ranks_);
  } catch (...) {
    for (const auto& [peer, s] : early) mesh_->detach(s);
    mesh_->discard_below(Kind::Phase, (seq_ + 1) << 16);
    // The same rows, so the same error, on every rank that answered.
    answer_rest(std::max(deadline, Clock::now() + kVerdictGrace), true);
    throw;
  }
}

void SocketPath::answer(int peer, Sends& sends, Clock::time_point deadline, bool more) {
  if (!owed_[size_t(peer)]) return;
  owed_[size_t(peer)] = false;
  auto out = std::make_shared<Send>();
  out->key = {Kind::Intent, exchanges_};
  out->parts = {{answer_.data(), answer_bytes_}};
  sends.emplace_back(peer, out);
  mesh_->post(peer, out, deadline, more);
}

void SocketPath::answer_rest(Clock::time_point deadline, bool quietly) {
  Sends answers;
  try {
    for (int r = 0; r < size_; ++r) {
      try {
        answer(r, answers, deadline);
      } catch (...) {
        if (!quietly) throw;
      }
    }
    await(answers, {}, deadline);
  } catch (...) {
    if (quietly) return;
    for (const auto& [peer, s] : answers) mesh_->abandon(peer, s);
    throw;
  }
}

void SocketPath::finish(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  settle(deadline);
  answer_rest(deadline);
}

void SocketPath::check_around_ring(const Intent& intent, Clock::time_point deadline) {
  intent.encode(reinterpret_cast<uint64_t*>(slot(rank_)), size_);
  const int next = (rank_ + 1) % size_, prev = (rank_ + size_ - 1) % size_;
  std::vector<std::pair<int, std::shared_ptr<Send>>> sends;
  // Step s forwards the row of rank - s and brings that of rank - s - 1.
  for (int s = 0; s + 1 < size_; ++s) {
    const int have = (rank_ - s + size_) % size_, bring = (rank_ - s - 1 + size_) % size_;
    const uint64_t key = exchanges_ << 20 | uint64_t(s);
    auto out = std::make_shared<Send>();
    out->key = {Kind::Intent, key};
    out->parts = {{slot(have), row_bytes_}};
    auto in = std::make_shared<Recv>();
    in->key = {Kind::Intent, key};
    in->parts = {{slot(bring), row_bytes_}};
    try {
      mesh_->post(prev, in, deadline);
      mesh_->post(next, out, deadline);
    } catch (...) {
      mesh_->abandon(prev, in);
      for (const auto& [peer, o] : sends) mesh_->abandon(peer, o);
      throw;
    }
    sends.emplace_back(next, out);
    await({}, {{prev, in}}, deadline);
  }
  await(sends, {}, deadline);
}

const std::vector<Intent>& SocketPath::meet(Intent intent, const void* base, uint64_t extent,
                                            std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  base_ = static_cast<char*>(const_cast<void*>(base));
  extent_ = base ? extent : 0;
  eager_in_ = false;
  std::fill(owed_.begin(), owed_.end(), false);
  drop_unsettled();
  intent.seq = ++seq_;
  // A phase message of an earlier collective that comes now (its receiver gave up on it, or
  // on the check before it) is dropped, never kept aside: every phase key of this one and
  // later ones is at least seq_ << 16.
  mesh_->discard_below(Kind::Phase, seq_ << 16);
  table_.assign(size_t(size_), intent);
  // Every member skips alike (same flags). all_to_all's intents differ by rank, so they always
  // travel.
  if (!(intent.flags & Intent::kAgreed) || intent.kind == CollectiveKind::AllToAll) {
    ++exchanges_;
    // A row or answer of an earlier exchange that comes now (its receiver gave up on it) is
    // dropped, never kept aside: every key of this one and later ones is at least this.
    mesh_->discard_below(Kind::Intent, size_ <= kDirectCheckMost ? exchanges_ : exchanges_ << 20);
    eager_in_ = eager_ > 0;
    if (size_ <= kDirectCheckMost) {
      if (broken_) {
        send_mark(deadline, exchanges_);
        raise_broken();
      }
      // Between two ranks the eager broadcasts this rank rooted; through the hub the digest of
      // the group's eager broadcasts as this rank ran them.
      intent.address = size_ == 2 ? rooted_ : digest_;
      post_rows(intent, deadline);
      // Until the first phase settles the check, every row reads as ours (with its kInline
      // flag): a schedule's sending side needs no other.
      Intent own;
      Intent::decode(reinterpret_cast<const uint64_t*>(slot(rank_)), size_, own);
      std::fill(table_.begin(), table_.end(), own);
      return table_;
    }
    check_around_ring(intent, deadline);
    for (int r = 0; r < size_; ++r)
      Intent::decode(reinterpret_cast<const uint64_t*>(slot(r)), size_, table_[size_t(r)]);
    check_agreement(table_, false, global_ranks_);
  }
  if (broken_) raise_broken();  // a collective whose intent was agreed beforehand: no row goes
  return table_;
}

void SocketPath::mark(int by, uint64_t at, const std::string& why) {
  if (broken_) return;
  broken_ = true;
  broken_by_ = by;
  broken_at_ = at;
  broken_why_ = printable(why.substr(0, 448));
}

void SocketPath::take_mark(int peer) {
  const Intent& theirs = table_[size_t(peer)];
  if (!(theirs.flags & kBroken)) return;
  mark(theirs.root, theirs.address, std::string(slot(peer) + row_bytes_, theirs.extent));
  raise_broken();
}

void SocketPath::refuse_row(int r, bool hang_up) {
  const std::string what =
      "sent an intent not of this group's form (cut short, too long, or not the bytes it states it carries)";
  // Directly, no verdict goes back to the row's sender: hung up on, its wait on this rank ends
  // at once, naming it, instead of running to its deadline.
  if (hang_up) mesh_->cut(r, what);
  throw BackendError("rank " + std::to_string(global_rank_of(global_ranks_, r)) + " " + what);
}

void SocketPath::drop_unsettled() {
  if (!unsettled_) return;  // else a collective that failed between its meeting and its first phase
  for (const auto& [peer, s] : rows_out_) mesh_->abandon(peer, s);
  for (const auto& [peer, r] : rows_) mesh_->abandon(peer, r);
  unsettled_ = false;
}

void SocketPath::raise_broken() const {
  throw CollectiveMismatchError("collective #" + std::to_string(seq_) + ": rank " + std::to_string(broken_by_) +
                                " found a disagreement on an eager broadcast at collective #" +
                                std::to_string(broken_at_) + " (" + broken_why_ +
                                "); every later collective of the group fails");
}

void SocketPath::send_mark(Clock::time_point deadline, uint64_t exchange) {
  if (exchange <= marked_through_) return;  // already on its way for that exchange
  marked_through_ = exchange;
  Intent m;
  m.kind = CollectiveKind::Broadcast;
  m.seq = seq_;
  m.root = broken_by_;
  m.address = broken_at_;
  m.flags = kBroken;
  mark_row_.assign((row_bytes_ + broken_why_.size() + 7) / 8, 0);
  char* row = reinterpret_cast<char*>(mark_row_.data());
  const size_t bytes = write_row(m, size_, row, row_bytes_, broken_why_.data(), broken_why_.size(), eager_);
  // To every peer: whichever of them waits on this rank for this exchange reads it; the others
  // drop it.
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    auto out = send_row(exchange, row, bytes);
    try {
      mesh_->post(r, out, deadline);
      if (!out->done) mesh_->detach(out);
    } catch (...) {  // the peer lost: its own error comes with the next operation that needs it
    }
  }
}

std::string SocketPath::roots_differ(CollectiveKind kind, uint64_t rooted) const {
  return std::string(collective_name(kind)) + " #" + std::to_string(seq_) + ": rank " +
         std::to_string(global_rank_of(global_ranks_, 1 - rank_)) + " rooted " + std::to_string(rooted) +
         " eager broadcasts, of which rank " + std::to_string(global_rank_of(global_ranks_, rank_)) + " received " +
         std::to_string(received_) + ": the ranks disagreed on the root of one";
}

void SocketPath::check_peer_row(const Intent& mine) {
  const int peer = 1 - rank_;
  const Intent& theirs = table_[size_t(peer)];
  take_mark(peer);
  try {
    if (theirs.flags & kEager) {
      check_agreement(table_, false, global_ranks_);
      throw CollectiveMismatchError(std::string(collective_name(mine.kind)) + " #" + std::to_string(seq_) +
                                    ": a peer runs an eager broadcast");
    }
    if (theirs.address != received_) throw CollectiveMismatchError(roots_differ(mine.kind, theirs.address));
  } catch (const CollectiveMismatchError& e) {
    mark(global_rank_of(global_ranks_, rank_), seq_, e.what());
    throw;
  }
}

bool SocketPath::same_broadcast(const Intent& a, const Intent& b) {
  return a.kind == b.kind && a.seq == b.seq && a.dtype == b.dtype && a.op == b.op && a.root == b.root &&
         a.bytes == b.bytes;
}

std::string SocketPath::against(const Intent& mine, const Intent& theirs, int r, const std::string& otherwise) const {
  // The receiver's view first, as on shared memory; a shared root as an index into the pair.
  std::vector<Intent> pair{mine, theirs};
  if (pair[0].root == pair[1].root) pair[0].root = pair[1].root = 0;
  try {
    check_agreement(pair, false, {global_rank_of(global_ranks_, rank_), global_rank_of(global_ranks_, r)});
  } catch (const CollectiveMismatchError& e) {
    return e.what();
  }
  return otherwise;
}

std::string SocketPath::digests_differ(CollectiveKind kind, int other) const {
  return std::string(collective_name(kind)) + " #" + std::to_string(seq_) + ": the eager broadcasts rank " +
         std::to_string(global_rank_of(global_ranks_, other)) + " ran before it differ from rank " +
         std::to_string(global_rank_of(global_ranks_, rank_)) +
         "'s (their number or their roots): the ranks disagreed on the root of one";
}

void SocketPath::found(const std::string& why, Clock::time_point deadline) {
  mark(global_rank_of(global_ranks_, rank_), seq_, why);
  mesh_->discard_below(Kind::Phase, (seq_ + 1) << 16);  // what a peer that met sent behind its row
  spread_mark(deadline);
  throw CollectiveMismatchError(why);
}

void SocketPath::adopt(const Intent& theirs, const char* text, Clock::time_point deadline) {
  mark(theirs.root, theirs.address, std::string(text, theirs.extent));
  spread_mark(deadline);
  raise_broken();
}

void SocketPath::spread_mark(Clock::time_point deadline) {
  send_mark(deadline, exchanges_);
  send_mark(deadline, exchanges_ + 1);
}

std::shared_ptr<SocketMesh::Recv> SocketPath::receive_row(int r) {
  auto in = std::make_shared<Recv>();
  in->key = {Kind::Intent, exchanges_};
  in->parts = {{slot(r), stride_}};
  in->at_most = true;
  return in;
}

std::shared_ptr<SocketMesh::Send> SocketPath::send_row(uint64_t exchange, const char* row, size_t bytes) {
  auto out = std::make_shared<Send>();
  out->key = {Kind::Intent, exchange};
  out->parts = {{row, bytes}};
  return out;
}

void SocketPath::check_hub_rows(const Recvs& in, Clock::time_point deadline) {
  const Intent& mine = table_[size_t(rank_)];
  auto drop_rest = [&] {
    for (const auto& [r, row] : in)
      if (!row->done) mesh_->abandon(r, row);
  };
  // A malformed row is left to the verdict below, which names it.
  for (const auto& [r, row] : in)
    if (row->done && (flagged(*row, r) & kBroken) && well_formed(*row, r)) {
      drop_rest();
      adopt(table_[size_t(r)], slot(r) + row_bytes_,
            deadline);  // in place of the answer: every rank raises the same error
    }
  bool all = true;
  for (const auto& [r, row] : in) {
    all = all && row->done;
    if (!(flagged(*row, r) & (kEager | kReceiver)) || !well_formed(*row, r)) continue;
    drop_rest();
    const Intent& theirs = table_[size_t(r)];
    found(against(mine, theirs, r,
                  std::string(collective_name(mine.kind)) + " #" + std::to_string(seq_) + ": rank " +
                      std::to_string(global_rank_of(global_ranks_, r)) +
                      ((theirs.flags & kEager) ? " roots" : " receives") + " an eager broadcast"),
          deadline);
  }
  if (!all) return;  // late ranks: the hub's verdict names them
  for (const auto& [r, row] : in) {
    if (row->differs || row->bytes < row_bytes_) continue;  // malformed: the verdict names it
    Intent t;
    Intent::decode(reinterpret_cast<const uint64_t*>(slot(r)), size_, t);
    if (t.address != digest_) found(digests_differ(mine.kind, r), deadline);
  }
}

void SocketPath::check_answer(const Recv& answer, Clock::time_point deadline) {
  auto short_answer = [&] {
    return BackendError("rank " + std::to_string(global_rank_of(global_ranks_, hub_)) + " sent " +
                        std::to_string(answer.bytes) + " bytes where the agreed schedule has " +
                        std::to_string(answer_bytes_));
  };
  if (answer.differs) return;  // check_sizes names the hub
  if (answer.bytes < row_bytes_) throw short_answer();
  Intent h;
  Intent::decode(reinterpret_cast<const uint64_t*>(answer_.data()), size_, h);
  if (h.flags & (kBroken | kEager)) {
    // A row with bytes behind it, which it must carry as it states, as any row.
    if (!(h.flags & Intent::kInline) || answer.bytes - row_bytes_ != h.extent) refuse_row(hub_, true);
    const Intent& mine = table_[size_t(rank_)];
    if (h.flags & kBroken) adopt(h, answer_.data() + row_bytes_, deadline);
    found(against(mine, h, hub_,
                  std::string(collective_name(mine.kind)) + " #" + std::to_string(seq_) + ": rank " +
                      std::to_string(global_rank_of(global_ranks_, hub_)) + " roots an eager broadcast"),
          deadline);
  }
  if (answer.bytes != answer_bytes_) throw short_answer();
}

void SocketPath::drain(Clock::time_point deadline) {
  // A look or a few, waiting for nothing: what has come at this exchange is taken, and what came
  // at an earlier one (a receiver's row that its hub's eager row was late for) is read and dropped,
  // so that a hub that only roots leaves nothing piling up in its peers' sockets.
  Recvs in;
  in.reserve(size_t(size_ - 1));
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    auto one = receive_row(r);
    one->passive = true;
    in.emplace_back(r, one);
  }
  auto drop = [&] {
    for (const auto& [r, one] : in) mesh_->abandon(r, one);
  };
  try {
    for (const auto& [r, one] : in) mesh_->post(r, one, deadline);
    // Each look reads what the sockets hold, and what it read ahead of the message in hand the
    // next takes: a few, so that rows left from earlier exchanges do not hide this one's mark.
    auto all = [&] { return std::all_of(in.begin(), in.end(), [](const auto& one) { return one.second->done; }); };
    bool read = true;
    for (int look = 0; read && look < kDrainLooks && !all(); ++look) {
      read = false;
      mesh_->progress(
          all, Clock::now(), [&] { read = true; }, false, [] { return std::vector<int>{}; }, true);
    }
  } catch (...) {
    drop();
    throw;
  }
  drop();
  if (table_.size() != size_t(size_)) table_.resize(size_t(size_));
  // A peer's mark: it goes out at this exchange in place of this rank's eager rows, so that the
  // receivers waiting for them raise it at this call. A receiver's row or a meeting row is left
  // to its sender, which finds against this rank's eager row.
  for (const auto& [r, one] : in)
    if (one->done && (flagged(*one, r) & kBroken)) {
      if (!well_formed(*one, r)) refuse_row(r, true);
      adopt(table_[size_t(r)], slot(r) + row_bytes_, deadline);
    }
}

void SocketPath::eager_through_hub(Intent mine, void* data, Clock::time_point deadline) {
  const int root = mine.root;
  // Every rank folds the broadcast's number and root, as it sees them, into its digest: the
  // root's row carries it, as do a receiver's row to the hub and every meeting row.
  digest_ = (digest_ ^ (seq_ * 0x9E3779B97F4A7C15ull + uint64_t(root) + 1)) * 0xff51afd7ed558ccdull;
  mine.address = digest_;
  if (rank_ == root) {
    if (rank_ == hub_) drain(deadline);
    mine.flags |= kEager;
    const size_t bytes =
        write_row(mine, size_, slot(rank_), row_bytes_, static_cast<const char*>(data), mine.bytes, eager_);
    Sends outs;
    outs.reserve(size_t(size_ - 1));
    try {
      for (int r = 0; r < size_; ++r) {
        if (r == rank_) continue;
        auto out = send_row(exchanges_, slot(rank_), bytes);
        outs.emplace_back(r, out);
        mesh_->post(r, out, deadline);
      }
    } catch (...) {
      for (const auto& [p, s] : outs) mesh_->abandon(p, s);
      throw;
    }
    // Written into the sockets: the receivers' checks need nothing more of this rank.
    await(outs, {}, deadline);
    return;
  }
  // A receiver's row goes to the hub, which so hears from every rank whatever it runs: a hub
  // that meets, or receives, waits for every rank's row. Nothing waits for it to be written.
  // Where the hub is the root it goes only once the hub's row has not come within a slice: a
  // hub that roots waits for none of them (its next look drops them unread, drain), and a hub
  // that meets instead is the one that waits for it.
  std::shared_ptr<Send> told;
  bool telling = rank_ != hub_;
  auto tell = [&] {
    telling = false;
    Intent row = mine;
    row.flags |= kReceiver;
    const size_t bytes = write_row(row, size_, slot(rank_), row_bytes_, nullptr, 0, eager_);
    told = send_row(exchanges_, slot(rank_), bytes);
    try {
      mesh_->post(hub_, told, deadline);
    } catch (const BackendError&) {  // the hub lost: its own error comes with a call that needs it
      told = nullptr;
    }
  };
  if (telling && root != hub_) tell();
  // At the hub, every other rank's row (the root's eager row, the receivers' rows); elsewhere the
  // root's row and, from a hub that is not the root, what it sends in its place (its marked row,
  // or its eager row where it claims the root), whichever comes first. That one is passive: a hub
  // that is done may leave.
  Recvs in;
  in.reserve(size_t(size_));
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || (rank_ != hub_ && r != root && r != hub_)) continue;
    auto one = receive_row(r);
    one->passive = rank_ != hub_ && r == hub_ && root != hub_;
    in.emplace_back(r, one);
  }
  auto drop = [&] {
    for (const auto& [r, one] : in) mesh_->abandon(r, one);
    if (told && !told->done) mesh_->detach(told);
  };
  // Done early on a marked row, or on anything but a receiver's row from a rank that is not
  // the root: where this rank is not the hub, whichever of the two comes first.
  auto enough = [&] {
    for (const auto& [r, one] : in) {
      if (!one->done) continue;
      if (rank_ != hub_) return true;
      const uint64_t f = flagged(*one, r);
      if ((f & kBroken) || (r == root) != bool(f & kEager) || (r != root && !(f & kReceiver))) return true;
    }
    return false;
  };
  const bool passive = rank_ != hub_ && root != hub_;
  auto done = [&] {
    return enough() || std::all_of(in.begin(), in.end(), [](const auto& one) { return one.second->done; });
  };
  auto late = [&] {
    std::vector<int> waited;
    for (const auto& [r, one] : in)
      if (!one->done) waited.push_back(r);
    return waited;
  };
  try {
    for (const auto& [r, one] : in) mesh_->post(r, one, deadline);
    // A wait leaves a passive receive alone once its connection's next message is not yet whole
    // (or is another's): the wait is cut into slices, each of which looks at it again.
    auto moved = Clock::now();  // carried across the slices: a stalled send is still rescued
    while (!done()) {
      const auto until = passive || telling ? std::min(deadline, Clock::now() + kPassiveSlice) : deadline;
      mesh_->progress(done, until, {}, !passive, late, until < deadline, &moved);
      if (telling && !done()) tell();
    }
  } catch (const TimeoutError& e) {
    drop();
    // Ranks that each take another for the root wait so: the group is broken from here, so that
    // no later collective passes over it.
    mark(global_rank_of(global_ranks_, rank_), seq_,
         "a row of its eager broadcast did not come in time (" + std::string(e.what()) + ")");
    throw;
  } catch (...) {
    drop();
    throw;
  }
  drop();
  try {
    check_eager_rows(mine, in, deadline);
  } catch (const CollectiveMismatchError& e) {
    // The root, which reads nothing, learns why once its socket to this rank fills.
    mesh_->give_notice(root, e.what());
    throw;
  }
  if (mine.bytes) std::memcpy(data, slot(root) + row_bytes_, mine.bytes);
}

void SocketPath::check_eager_rows(const Intent& mine, const Recvs& in, Clock::time_point deadline) {
  const int root = mine.root;
  if (table_.size() != size_t(size_)) table_.resize(size_t(size_));
  for (const auto& [r, one] : in)
    if (one->done && !well_formed(*one, r)) refuse_row(r, true);
  for (const auto& [r, one] : in)
    if (one->done && (table_[size_t(r)].flags & kBroken)) adopt(table_[size_t(r)], slot(r) + row_bytes_, deadline);
  const std::string what = "broadcast #" + std::to_string(seq_) + ": ";
  const Recv* from_root = nullptr;
  for (const auto& [r, one] : in) {
    if (!one->done) continue;
    const Intent& theirs = table_[size_t(r)];
    const std::string other = std::to_string(global_rank_of(global_ranks_, r));
    const bool same = same_broadcast(mine, theirs) && theirs.address == digest_;
    if (r == root) {
      if (!(theirs.flags & kEager) || !same)
        found(against(mine, theirs, r,
                      !(theirs.flags & kEager) ? what + "root rank " + other + " meets instead of an eager broadcast"
                                               : digests_differ(mine.kind, r)),
              deadline);
      from_root = one.get();
    } else if (theirs.flags & kReceiver) {  // at the hub: another receiver of this broadcast
      if (!same) found(against(mine, theirs, r, digests_differ(mine.kind, r)), deadline);
    } else {
      found(against(mine, theirs, r,
                    what + "rank " + other +
                        ((theirs.flags & kEager) ? " roots an eager broadcast"
                                                 : " meets instead of an eager broadcast")),
            deadline);
    }
  }
  if (!from_root) throw BackendError(what + "the root's row did not come");  // what came raised above
}

bool SocketPath::broadcast_eager(const Intent& intent, void* data, std::chrono::milliseconds timeout) {
  const int root = intent.root;
  if (size_ < 2 || size_ > kDirectCheckMost || intent.kind != CollectiveKind::Broadcast ||
      intent.bytes > kEagerBroadcastBytes || root < 0 || root >= size_)
    return false;
  const auto deadline = Clock::now() + timeout;
  const int peer = 1 - rank_;
  base_ = nullptr;
  extent_ = 0;
  eager_in_ = false;
  drop_unsettled();
  Intent mine = intent;
  mine.seq = ++seq_;
  ++exchanges_;
  // As at a meeting: what an earlier collective left unread is dropped as it comes.
  mesh_->discard_below(Kind::Phase, seq_ << 16);
  mesh_->discard_below(Kind::Intent, exchanges_);
  if (broken_) {
    send_mark(deadline, exchanges_);
    raise_broken();
  }
  if (size_ > 2) {
    eager_through_hub(mine, data, deadline);
    return true;
  }
  if (rank_ == root) {
    mine.flags |= kEager;
    mine.address = ++rooted_;
    const size_t bytes =
        write_row(mine, size_, slot(rank_), row_bytes_, static_cast<const char*>(data), intent.bytes, eager_);
    auto out = send_row(exchanges_, slot(rank_), bytes);
    mesh_->post(peer, out, deadline);
    // Written into the socket: the receiver's check needs nothing more of this rank.
    await({{peer, out}}, {}, deadline);
    return true;
  }
  ++received_;
  auto in = receive_row(peer);
  mesh_->post(peer, in, deadline);
  try {
    progress({}, {{peer, in}}, deadline);
  } catch (const TimeoutError& e) {
    // Both ranks waiting as receivers is how a disagreement on the root can look (each taking
    // the other for it), and its counts would cancel one where both claimed it: the group is
    // broken from here, so that no later collective passes over it.
    mark(global_rank_of(global_ranks_, rank_), seq_,
         "its root's row did not come in time (" + std::string(e.what()) + ")");
    throw;
  }
  if (table_.size() != size_t(size_)) table_.resize(size_t(size_));
  if (!well_formed(*in, peer)) refuse_row(peer, true);
  const Intent& theirs = table_[size_t(peer)];
  take_mark(peer);
  const bool eager = theirs.flags & kEager;
  // The root's count of eager broadcasts against ours.
  if (!eager || !same_broadcast(mine, theirs) || theirs.address != received_) {
    const std::string why = against(mine, theirs, peer,
                                    !eager ? "broadcast #" + std::to_string(seq_) + ": root rank " +
                                                 std::to_string(global_rank_of(global_ranks_, peer)) +
                                                 " meets instead of an eager broadcast"
                                           : roots_differ(mine.kind, theirs.address));
    mark(global_rank_of(global_ranks_, rank_), seq_, why);
    mesh_->discard_below(Kind::Phase, (seq_ + 1) << 16);  // what a peer that met sent behind its row
    // A peer that met waits for this row at this exchange; an eager root has returned, and
    // reads its next row at the next exchange: the mark goes there, so that the root learns
    // of it even if this rank makes no further call.
    send_mark(deadline, eager ? exchanges_ + 1 : exchanges_);
    if (eager) mesh_->give_notice(peer, why);  // a root that never reads learns why its socket fills
    throw CollectiveMismatchError(why);
  }
  if (intent.bytes) std::memcpy(data, slot(peer) + row_bytes_, intent.bytes);
  return true;
}

void SocketPath::run(Schedule& schedule, int phase, std::chrono::milliseconds timeout) {
  if (phase >= 1 << 16) throw BackendError("a collective of more than 65536 phases");
  const auto deadline = Clock::now() + timeout;
  const uint64_t key = seq_ << 16 | uint64_t(phase);
  // Through a hub, every rank settles before it sends: the hub so that its answer rides on
  // what it sends, the others so that no byte goes ahead of the check to a peer whose next
  // messages may all go through the hub (nothing would read it, and drop it, until then).
  if (hub_ >= 0) settle(deadline);
  // Phase 0 sees every buffer as it was at the meeting: an eager sender's bytes came with its
  // intent (to the hub only, where there is one), and it sends its reader nothing now.
  auto eager = [&](int from, int reader) {
    return phase == 0 && eager_in_ && (table_[size_t(from)].flags & Intent::kInline) && (hub_ < 0 || reader == hub_);
  };
  // What every reader takes from us, in its order: the schedule is the same function of the
  // same intents on every rank, and a sender's side of it depends on its own intent only, so
  // between two ranks it goes out before the check settles. Checked against what we exposed before anything
  // moves.
  std::vector<std::shared_ptr<Send>> to(static_cast<size_t>(size_));
  try {
    for (int reader = 0; reader < size_; ++reader) {
      if (reader == rank_) continue;
      schedule.pieces(phase, reader, [&](const Piece& p) {
        if (p.peer != rank_) return;
        check_piece(global_ranks_, reader, rank_, p, extent_);
        if (eager(rank_, reader)) return;
        auto& s = to[size_t(reader)];
        if (!s) s = std::make_shared<Send>(), s->key = {Kind::Phase, key};
        s->parts.emplace_back(base_ + p.offset, p.bytes);
      });
    }
  } catch (...) {
    settle(deadline);  // a disagreement is the error every rank reports
    answer_rest(deadline, true);
    throw;
  }
  // What we take, in order, each from its peer's message at `at`; pieces folded in parts land
  // in scratch, one after another.
  struct Mine {
    Piece piece;
    size_t at = 0;       // where in its peer's message
    size_t scratch = 0;  // where in scratch_ (folded pieces)
    size_t taken = 0;
  };
  std::vector<Mine> mine;
  std::vector<std::shared_ptr<Recv>> in(static_cast<size_t>(size_));
  Sends sends;
  Recvs recvs;
  // An answer and a message to each reader at most: one allocation, not one per doubling.
  if (std::any_of(to.begin(), to.end(), [](const auto& s) { return s != nullptr; })) sends.reserve(2 * size_t(size_));
  try {
    for (int r = 0; r < size_; ++r)
      if (to[size_t(r)]) {
        answer(r, sends, deadline, true);
        mesh_->post(r, to[size_t(r)], deadline), sends.emplace_back(r, to[size_t(r)]);
      }
    settle(deadline, sends);
    std::vector<size_t> from(size_t(size_), 0);  // bytes of each peer's message
    size_t folded = 0;
    schedule.pieces(phase, rank_, [&](const Piece& p) {
      Mine m{p};
      if (eager(p.peer, rank_)) {
        check_piece(global_ranks_, rank_, p.peer, p, std::min<uint64_t>(table_[size_t(p.peer)].extent, eager_));
      } else {
        m.at = from[size_t(p.peer)];
        from[size_t(p.peer)] += p.bytes;
        if (!p.dst) m.scratch = folded, folded += p.bytes;
      }
      if (mine.empty()) mine.reserve(size_t(size_));
      mine.push_back(m);
    });
    if (scratch_.size() < folded) scratch_.resize(folded);
    for (const Mine& m : mine) {
      if (eager(m.piece.peer, rank_)) continue;
      auto& r = in[size_t(m.piece.peer)];
      if (!r) r = std::make_shared<Recv>(), r->key = {Kind::Phase, key};
      r->parts.emplace_back(m.piece.dst ? m.piece.dst : scratch_.data() + m.scratch, m.piece.bytes);
    }
    for (int r = 0; r < size_; ++r)
      if (in[size_t(r)]) mesh_->post(r, in[size_t(r)], deadline), recvs.emplace_back(r, in[size_t(r)]);
    // A peer may wait for its answer before it sends what we wait for now.
    if (!recvs.empty())
      for (int r = 0; r < size_; ++r) answer(r, sends, deadline);
  } catch (...) {
    for (const auto& [peer, s] : sends) mesh_->abandon(peer, s);
    for (const auto& [peer, r] : recvs) mesh_->abandon(peer, r);
    throw;
  }
  // Folds what has arrived, in the order the pieces were emitted.
  size_t next = 0;
  auto fold = [&] {
    for (; next < mine.size(); ++next) {
      Mine& m = mine[next];
      const Piece& p = m.piece;
      if (eager(p.peer, rank_)) {
        const char* bytes = slot(p.peer) + row_bytes_ + p.offset;
        if (p.dst)
          std::memcpy(p.dst, bytes, p.bytes);
        else
          schedule.take(p, 0, bytes, p.bytes);
        continue;
      }
      if (p.dst) continue;
      const Recv& r = *in[size_t(p.peer)];
      const size_t arrived = r.done ? p.bytes : std::min(p.bytes, r.got > m.at ? r.got - m.at : 0);
      size_t ready = arrived == p.bytes ? arrived : arrived / kFoldPart * kFoldPart;
      if (ready > m.taken) {
        schedule.take(p, m.taken, scratch_.data() + m.scratch + m.taken, ready - m.taken);
        m.taken = ready;
      }
      if (m.taken < p.bytes) return;
    }
  };
  await(sends, recvs, deadline, fold);
  fold();
}

namespace {

// distrun's sockets: the path between hosts unless DISTRUN_TCP names another.
[[maybe_unused]] const bool registered =
    register_path({"socket", PathEntry::Hosts, 0,
                   [](const PathGroup& g) { return std::make_unique<SocketPath>(g.sockets(), g.global_ranks); }});

}  // namespace

}  // namespace distrun
