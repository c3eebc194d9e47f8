// c10d's vocabulary for collectives: reduction operators and one options struct per collective.
// Ranks in these options are ranks within the backend's group (0..size-1).
#pragma once
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "distrun/core/dtype.hpp"

namespace distrun {

enum class ReduceOp : uint8_t { Sum, Avg, Prod, Min, Max, BAnd, BOr, BXor };

/// "sum", "avg", ... as the scenario format spells them.
const char* reduce_op_name(ReduceOp op);
std::optional<ReduceOp> parse_reduce_op(std::string_view name);
/// Why `op` cannot reduce `dtype` ("reduce op 'band' needs ..."), or nothing when it can: bitwise
/// reductions need an integer or bool dtype, and avg is not defined for bool (torch refuses it).
std::optional<std::string> reduce_op_refusal(ReduceOp op, DType dtype);
/// Why NCCL cannot carry `dtype` ("backend nccl has no type for dtype int16 ..."), or nothing:
/// what the NCCL backend refuses at run time, said here so that a check without a GPU (the
/// launcher's, before any worker) refuses the same with the same words.
std::optional<std::string> nccl_dtype_refusal(DType dtype);
/// Why NCCL cannot reduce with `op` (it has no bitwise reductions), or nothing.
std::optional<std::string> nccl_reduce_refusal(ReduceOp op);

/// The world's rank of group rank `r`, for a group whose members are `global_ranks` (empty:
/// the group is the world). Every message that names a rank names this one.
inline int global_rank_of(const std::vector<int>& global_ranks, int r) {
  return global_ranks.empty() ? r : global_ranks.at(size_t(r));
}

struct CollectiveOptions {
  std::chrono::milliseconds timeout{0};  // 0: the backend's default timeout
};
struct BroadcastOptions : CollectiveOptions {
  int root = 0;
};
struct AllreduceOptions : CollectiveOptions {
  ReduceOp op = ReduceOp::Sum;
};
struct AllreduceCoalescedOptions : AllreduceOptions {
  size_t bucket_bytes = 25u << 20;  // tensors are packed into buckets of about this size
};
struct ReduceOptions : CollectiveOptions {
  int root = 0;
  ReduceOp op = ReduceOp::Sum;
};
struct AllgatherOptions : CollectiveOptions {};
struct GatherOptions : CollectiveOptions {
  int root = 0;
};
struct ScatterOptions : CollectiveOptions {
  int root = 0;
};
struct ReduceScatterOptions : CollectiveOptions {
  ReduceOp op = ReduceOp::Sum;
};
struct AllToAllOptions : CollectiveOptions {
  // Elements sent to / received from each rank; both empty means equal splits.
  std::vector<int64_t> send_counts;
  std::vector<int64_t> recv_counts;
};
struct BarrierOptions : CollectiveOptions {};
struct SendOptions : CollectiveOptions {
  int tag = 0;
};

}  // namespace distrun
