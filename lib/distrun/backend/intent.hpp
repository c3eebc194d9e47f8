// What a rank is about to do in a collective, published before any byte moves, so that no
// rank ever trusts a peer's buffer on the strength of its own arguments. Each rank states
// which collective (and its sequence number), the dtype, the reduction, the root, the bytes it
// contributes (and, for the single-copy path, where its buffer is and how far it extends);
// every rank then checks every rank's statement against every other's, so a disagreement
// is the same typed error on every rank, naming the ranks and the sizes, instead of a read
// past a peer's buffer (shared memory) or an abort deep inside Gloo (TCP). One exception in
// timing: a broadcast of at most 512 B through shared memory, or over the sockets in groups of
// up to 16, is eager (the root does not wait for its receivers' intents). A rank that sees the
// disagreement raises at that call and marks the group broken; the others, the root among
// them, raise it at their next collective on the group that reads the mark (before any byte of
// it moves) and at every later one (host/paths/shm_path.hpp, host/paths/socket_path.hpp).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "distrun/backend/op.hpp"
#include "distrun/backend/types.hpp"
#include "distrun/core/error.hpp"

namespace distrun {

/// The ranks disagree on a collective (its kind, sequence, dtype, op, root or sizes). Raised
/// on every rank with the same message, before any rank reads a peer's data.
class CollectiveMismatchError : public BackendError {
 public:
  using BackendError::BackendError;
};

struct Intent {
  CollectiveKind kind{};
  uint64_t seq = 0;
  uint32_t dtype = 0;
  uint32_t op = 0xff;    // ReduceOp, or 0xff for collectives that do not reduce
  int32_t root = -1;     // -1 for rootless collectives
  uint64_t bytes = 0;    // per-rank block: what each rank contributes or receives (not all_to_all)
  uint64_t address = 0;  // single-copy path: where this rank's buffer starts ...
  uint64_t extent = 0;   // ... and how many bytes of it peers may read (TCP: of kInline's copy)
  uint64_t flags = 0;    // transport's own: kInline = the extent is also copied in the shared slot,
                         // or on TCP sent with the intent
  // The bytes of this rank's buffer of n blocks, where it has one: all_gather's output,
  // reduce_scatter's input, gather's output and scatter's input on the root. Checked to be
  // n * bytes with the rest, so a wrong buffer is the same error on every rank. kUnstated:
  // the caller sized its buffers itself (a schedule's test, a composite collective's step).
  static constexpr uint64_t kUnstated = ~uint64_t(0);
  uint64_t whole = kUnstated;
  // all_to_all only: where the block for rank j starts in the buffer, its bytes, and the bytes
  // expected from rank j.
  std::vector<uint64_t> send_offset, send_bytes, recv_bytes;

  /// Words in the wire form of one rank's intent in a group of n.
  static size_t words(int n) { return kHeaderWords + 3 * size_t(n); }
  /// Into `out` (words(n) of them); the per-rank vectors are written for all_to_all only.
  void encode(uint64_t* out, int n) const;
  static Intent decode(const uint64_t* in, int n);
  /// As decode, into `into`, whose vectors keep their storage (no allocation per collective).
  static void decode(const uint64_t* in, int n, Intent& into);

  static constexpr size_t kHeaderWords = 10;
  static constexpr uint64_t kInline = 1;
  /// Set by a caller that already checked this collective across a group containing this one
  /// (the hierarchical path checks the whole group once, then runs derived steps on sub-groups):
  /// a transport whose check costs a network round trip may skip it.
  static constexpr uint64_t kAgreed = 2;
};

/// Checks every rank's intent against every other's (and, with `extents`, that each buffer
/// covers what peers will read of it); throws CollectiveMismatchError naming the global ranks
/// (`global_rank(r)` for group rank r) and the sizes. Every rank runs it over the same table,
/// so every rank reaches the same verdict.
void check_agreement(const std::vector<Intent>& all, bool extents, const std::vector<int>& global_ranks);

/// The bytes of rank r's buffer that peers read in this collective (its extent must cover it).
uint64_t readable_bytes(const Intent& intent, int r, int n);

}  // namespace distrun
