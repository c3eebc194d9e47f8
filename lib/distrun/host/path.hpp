// A path moves blocks between the members of a group; the collectives' algorithms are written
// once over it (algorithms.hpp) and say which blocks move, phase by phase. Three paths implement
// it: shared memory (paths/shm_path.hpp), distrun's own sockets (paths/socket_path.hpp) and
// Gloo's TCP pairs (paths/tcp_path.hpp, DISTRUN_TCP=gloo).
//
// The model is one-sided. In a collective every rank states its intent and exposes one buffer
// (meet); in each phase every rank takes pieces of its peers' exposed buffers, either copied to
// where it says or handed to the schedule to fold in (a reduction). Shared memory takes them
// itself (from a peer's inline slot, or with a single-copy read of its buffer). TCP cannot reach
// into a peer, so each rank also works out what its peers take from it: a schedule is a pure
// function of the agreed intents, the same on every rank, so the sender and the reader list the
// same pieces in the same order.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "distrun/backend/intent.hpp"
#include "distrun/backend/types.hpp"

namespace distrun {

struct Piece {
  int peer = 0;         // whose exposed buffer
  uint64_t offset = 0;  // where in it
  size_t bytes = 0;
  char* dst = nullptr;  // copied here; nullptr: handed to Schedule::take in parts
};

/// What moves in one collective, for any reader. Pieces of 0 bytes are never emitted.
class Schedule {
 public:
  virtual ~Schedule() = default;
  virtual int phases() const = 0;
  /// The pieces `reader` takes in `phase`, in the order it takes them. `dst` matters only when
  /// reader is the calling rank (a sender lists its readers' pieces to know what to send).
  virtual void pieces(int phase, int reader, const std::function<void(const Piece&)>& emit) const = 0;
  /// `bytes` of a piece without dst, `at` bytes into it; called in the order the pieces were
  /// emitted and, within a piece, at increasing `at`. `data` is valid during the call only.
  virtual void take(const Piece& piece, size_t at, const char* data, size_t bytes) = 0;
};

class Path {
 public:
  virtual ~Path() = default;
  /// "shm", "shm/tcp-sync" or "tcp": for logs and benchmark provenance.
  virtual std::string name() const = 0;
  /// True when a rank reads its peers' memory itself: each piece costs no work of the peer,
  /// so the direct algorithms (every rank takes from every peer) are the best at every size.
  virtual bool reads_peers() const = 0;

  /// States `intent` (this rank's view; the path numbers it) and exposes `extent` bytes at
  /// `base` (nullptr, 0: nothing) to the peers' pieces. Returns every rank's intent once they
  /// agree; a disagreement is the same CollectiveMismatchError on every rank, before a rank
  /// takes a byte of a peer's. A path may return before the peers' intents are in (the
  /// sockets send a first phase right behind the intent): then every row reads as this rank's
  /// own until the first run() or finish() completes the check (and may throw its error), so
  /// a caller uses its own row only and writes its outputs after the phases.
  virtual const std::vector<Intent>& meet(Intent intent, const void* base, uint64_t extent,
                                          std::chrono::milliseconds timeout) = 0;
  /// Phase `phase` of `schedule`: this rank's pieces are in when it returns (and on TCP, its
  /// readers' pieces are sent). A phase sees each peer's exposed buffer as that peer left it
  /// at the end of the previous phase (in phase 0, as it was at meet).
  virtual void run(Schedule& schedule, int phase, std::chrono::milliseconds timeout) = 0;
  /// Ends the collective: returns once no peer will read this rank's exposed buffer again.
  virtual void finish(std::chrono::milliseconds timeout) = 0;
  /// The rank through which this path prefers small collectives to go, or -1 (every rank to
  /// every rank). Where a path has one, a rank's intent, and the buffer that rides with it,
  /// reach the hub only, and the hub's answer (every intent, so that a disagreement is the same
  /// error everywhere) rides on its first message to each rank: a schedule that takes every
  /// peer's buffer at the hub in its first phase and hands the hub's result out in the next
  /// moves a small collective in 2(n - 1) messages, the check included, where every buffer
  /// rides with its intent (paths/socket_path.hpp). The hub answers a rank in a phase where
  /// it sends to that rank, every rank in a phase where it receives, and the rest at finish():
  /// a schedule must not have the hub wait, in a later phase, on a rank it has not answered.
  virtual int hub() const { return -1; }
  /// A broadcast that does not meet (root's intent.bytes at `data` into every rank's `data`),
  /// where the path has one for this intent: the root returns once its bytes are posted, and
  /// a disagreement reaches it later (paths/shm_path.hpp, paths/socket_path.hpp). False:
  /// nothing done, meet instead.
  virtual bool broadcast_eager(const Intent&, void*, std::chrono::milliseconds) { return false; }
};

/// The largest broadcast a path may run eagerly (broadcast_eager): shared memory's ring entry
/// and the sockets' alike.
inline constexpr size_t kEagerBroadcastBytes = 512;

/// TCP paths: the most bytes of a buffer sent with its intent in a group of `size`: at most the
/// direct algorithms' 64 KiB, within a budget of about 1 MiB over all peers, never under 4 KiB.
inline size_t eager_bytes(int size) {
  constexpr size_t most = size_t(64) << 10, least = size_t(4) << 10, budget = size_t(1) << 20;
  return std::clamp(budget / size_t(size), least, most) & ~size_t(7);
}

/// TCP paths: writes `intent` as this rank's row at `row` (`row_bytes` long) in a group of
/// `size` and, when the exposed buffer (`base`, `extent`) fits in `eager` bytes, the buffer
/// right behind it, the row saying so (kInline, its extent), so a small collective is one
/// message each way; `base` null: the row says so, but no byte is copied (a row that goes
/// nowhere, as the hub's). Returns the bytes to send.
inline size_t write_row(Intent intent, int size, char* row, size_t row_bytes, const char* base, uint64_t extent,
                        size_t eager) {
  size_t bytes = row_bytes;
  if (extent <= eager) {
    intent.flags |= Intent::kInline;
    intent.extent = extent;
    if (extent && base) std::memcpy(row + row_bytes, base, extent);
    bytes += extent;
  }
  intent.encode(reinterpret_cast<uint64_t*>(row), size);
  return bytes;
}

/// TCP paths: throws when `reader`'s piece lies outside the `extent` that rank `owner` exposed
/// (group ranks; named by their global ranks).
inline void check_piece(const std::vector<int>& global_ranks, int reader, int owner, const Piece& p, uint64_t extent) {
  if (p.offset <= extent && p.bytes <= extent - p.offset) return;
  throw CollectiveMismatchError("rank " + std::to_string(global_rank_of(global_ranks, reader)) + " would take " +
                                std::to_string(p.bytes) + " bytes at offset " + std::to_string(p.offset) + " of rank " +
                                std::to_string(global_rank_of(global_ranks, owner)) + "'s buffer of " +
                                std::to_string(extent));
}

}  // namespace distrun
