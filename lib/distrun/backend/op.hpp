// One collective as a Backend runs it: which collective (its kind), its buffers and its
// arguments, in one description that every layer takes through one entry point
// (Backend::run), and the form of each kind (what its buffers are, whether it has a root or a
// reduction), stated once in a table that the backends and the recorder read instead of
// carrying a method per collective.
#pragma once
#include <cstdint>
#include <iterator>
#include <vector>

#include "distrun/backend/types.hpp"
#include "distrun/core/tensor.hpp"

namespace distrun {

/// The collectives, numbered as they travel in an intent (intent.hpp).
enum class CollectiveKind : uint32_t {
  Broadcast = 1,
  AllReduce,
  Reduce,
  AllGather,
  Gather,
  Scatter,
  ReduceScatter,
  AllToAll,
  Barrier
};

/// How a kind's buffers relate to each other; the block is what one rank contributes or receives.
enum class Buffers : uint8_t {
  None,       // no data (barrier)
  InPlace,    // `out` only, one block, the same size on every rank (broadcast, all_reduce, reduce)
  Gathers,    // `in` is the block, `out` holds size() blocks in rank order (all_gather, gather)
  Scatters,   // `in` holds size() blocks, `out` is the block (scatter, reduce_scatter)
  Exchanges,  // block j of `in` goes to rank j; `out` the blocks received (all_to_all; counts)
};

struct CollectiveForm {
  const char* name;  // "all_reduce", as torch and the scenario format spell it
  bool rooted;       // takes a root: a rooted Gathers' output, and a rooted Scatters' input,
                     // are the root's only; a rooted reduction's result is the root's only
  bool reduces;      // takes a ReduceOp
  Buffers buffers;
};

/// The form of each kind, in the enum's order from Broadcast: a new kind is its value above and
/// its row here.
inline constexpr CollectiveForm kCollectiveForms[] = {
    {"broadcast", true, false, Buffers::InPlace},       {"all_reduce", false, true, Buffers::InPlace},
    {"reduce", true, true, Buffers::InPlace},           {"all_gather", false, false, Buffers::Gathers},
    {"gather", true, false, Buffers::Gathers},          {"scatter", true, false, Buffers::Scatters},
    {"reduce_scatter", false, true, Buffers::Scatters}, {"all_to_all", false, false, Buffers::Exchanges},
    {"barrier", false, false, Buffers::None},
};
static_assert(uint32_t(CollectiveKind::Barrier) == std::size(kCollectiveForms), "a form for every kind, in order");

/// Whether `k` is the number of a kind (one read off the wire may be anything).
bool is_collective_kind(uint64_t k);
/// The form of `kind` (BackendError for a number that is no kind).
const CollectiveForm& form_of(CollectiveKind kind);
/// The bytes of a rank's larger buffer in a group of n, for a block of `bytes`: n blocks for
/// Gathers and Scatters (what a hub moves for each peer), else the block.
uint64_t larger_buffer(CollectiveKind kind, uint64_t bytes, size_t n);
/// form_of(kind).name, or "an unknown collective".
const char* collective_name(CollectiveKind kind);

/// One call of a collective on this rank. `in` and `out` as the kind's Buffers say (the
/// caller's tensors, which must outlive the call; `in` is null for the in-place kinds, both for
/// a barrier); a buffer the kind has on the root only is ignored elsewhere, but points to a
/// tensor (an empty one will do). Ranks are the group's.
struct CollectiveOp : CollectiveOptions {
  CollectiveKind kind{};
  const Tensor* in = nullptr;
  Tensor* out = nullptr;
  int root = -1;                    // rooted kinds
  ReduceOp reduce = ReduceOp::Sum;  // reducing kinds
  // all_to_all: elements sent to / received from each rank; both empty means equal blocks.
  std::vector<int64_t> send_counts, recv_counts;

  const CollectiveForm& form() const { return form_of(kind); }
  /// The tensor that is this rank's block (what it contributes or receives), for records:
  /// the output of Scatters and in-place kinds, else the input; null for a barrier.
  const Tensor* block() const;
};

}  // namespace distrun
