// Every collective distrun-bench measures, described once: how its buffers are laid out, how
// it runs, what a correct result holds, and nccl-tests' bus-bandwidth factor. The engine
// (engine.hpp) knows no collective by name; a new collective is one entry in collectives.cpp.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "distrun/backend/backend.hpp"

namespace distrun::bench {

/// How the per-rank buffers relate to the reported size's `count` elements.
enum class Layout {
  Whole,     // in and out both hold count (all_reduce, broadcast, reduce, send_recv)
  Gathers,   // in holds count/n, out holds count (all_gather, gather)
  Splits,    // in holds count, out holds count/n (reduce_scatter, scatter)
  Exchange,  // in and out both hold count, in n blocks (all_to_all)
};

/// What "in-place" means for the collective (nccl-tests' second set of columns).
enum class InPlace {
  None,          // no in-place form: the in-place columns read N/A
  Same,          // out is in
  InIsOwnSlot,   // in is block `rank` of out (all_gather, gather)
  OutIsOwnSlot,  // out is block `rank` of in (reduce_scatter, scatter)
  // out is in, but the backend reads in while it writes out (all_to_all, send_recv): the run
  // copies in aside first, as a caller of an in-place API must, and the time includes the copy
  Staged,
};

/// What one run needs besides its buffers; ranks are ranks of the backend's group.
struct RunArgs {
  ReduceOp op = ReduceOp::Sum;
  int root = 0;
  int rank = 0;
  int size = 1;
  int64_t block = 0;  // elements per rank block (count/n for the split layouts)
  std::chrono::milliseconds timeout{0};
};

/// The value the checked run puts in element `e` of rank `r`'s input (small integers, exact
/// in every dtype and in every reduction over the ranks).
double fill_value(ReduceOp op, int size, int r, int64_t e);
/// Element `e` of the reduction over every rank's fill_value.
double reduced_value(ReduceOp op, int size, int64_t e, bool integer);

struct Collective {
  const char* name;
  /// The backend's collective (Backend::run), or none: send_recv, which is point to point.
  std::optional<CollectiveKind> kind;
  Layout layout;
  InPlace in_place;
  bool reduces;  // uses -o (the kind's form says)
  bool rooted;   // uses -r (the kind's form says)
  /// nccl-tests' busbw = algbw * factor on `n` ranks.
  double (*bus_factor)(int n);
  /// True when rank a.rank's `out` has a defined result (e.g. only the root's for reduce).
  bool (*has_result)(const RunArgs& a);
  /// Element `e` of a correct `out` on rank a.rank, every rank's input being fill_value.
  double (*expected)(const RunArgs& a, int64_t e, bool integer);
  /// One run from `in` into `out` (the same tensor, or views of one, in place).
  void run(Backend& b, const Tensor& in, Tensor& out, const RunArgs& a) const;
};

/// Every collective, in the order `all` runs them.
const std::vector<Collective>& collectives();
/// The entry called `name`, or nullptr.
const Collective* find_collective(std::string_view name);
/// The names (with `rooted_only`, those that take a root), comma separated, for help texts and
/// errors.
std::string collective_names(bool rooted_only = false);

/// Elements per rank buffer and the size nccl-tests reports for `bytes` requested: the whole
/// elements that fit, and layouts that split a buffer across ranks round the count down to a
/// multiple of n. As nccl-tests, a size below one element (or one per rank) is 0 elements, 0 B.
struct SizeCount {
  int64_t count;
  int64_t bytes;
};
SizeCount size_count(const Collective& c, int64_t bytes, size_t element_size, int n);

}  // namespace distrun::bench
