#include "distrun/backend/backend.hpp"

#include <algorithm>

#include "distrun/backend/intent.hpp"
#include "distrun/core/error.hpp"

namespace distrun {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Prod: return "prod";
    case ReduceOp::Min: return "min";
    case ReduceOp::Max: return "max";
    case ReduceOp::BAnd: return "band";
    case ReduceOp::BOr: return "bor";
    case ReduceOp::BXor: return "bxor";
  }
  return "?";
}

std::optional<ReduceOp> parse_reduce_op(std::string_view n) {
  for (auto op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max, ReduceOp::BAnd,
                  ReduceOp::BOr, ReduceOp::BXor})
    if (n == reduce_op_name(op)) return op;
  if (n == "mean") return ReduceOp::Avg;
  if (n == "product") return ReduceOp::Prod;
  return std::nullopt;
}

std::optional<std::string> reduce_op_refusal(ReduceOp op, DType dtype) {
  const std::string what = std::string("reduce op '") + reduce_op_name(op) + "'";
  const bool bitwise = op == ReduceOp::BAnd || op == ReduceOp::BOr || op == ReduceOp::BXor;
  if (bitwise && !is_integer(dtype)) return what + " needs an integer or bool dtype, not " + dtype_name(dtype);
  if (op == ReduceOp::Avg && dtype == DType::Bool)
    return what + " is not defined for bool (max is 'any', min is 'all')";
  return std::nullopt;
}

std::optional<std::string> nccl_dtype_refusal(DType dtype) {
  if (dtype != DType::Int16) return std::nullopt;
  return std::string("backend nccl has no type for dtype ") + dtype_name(dtype) +
         " (NCCL has no 16-bit integer; use backend gloo or int32)";
}

std::optional<std::string> nccl_reduce_refusal(ReduceOp op) {
  if (op != ReduceOp::BAnd && op != ReduceOp::BOr && op != ReduceOp::BXor) return std::nullopt;
  // torch refuses them on NCCL too.
  return std::string("backend nccl does not support reduce op '") + reduce_op_name(op) +
         "' (NCCL has sum, avg, prod, min and max; use backend gloo for band/bor/bxor)";
}

int Backend::group_rank(int g) const {
  if (global_ranks_.empty()) return g >= 0 && g < size_ ? g : -1;
  auto it = std::find(global_ranks_.begin(), global_ranks_.end(), g);
  return it == global_ranks_.end() ? -1 : int(it - global_ranks_.begin());
}

void Backend::check_group_ranks(const std::vector<int>& ranks) const {
  for (size_t i = 0; i < ranks.size(); ++i)
    if (ranks[i] < 0 || ranks[i] >= size_ || (i > 0 && ranks[i] <= ranks[i - 1]))
      throw BackendError("new_group: ranks must be ascending, unique and within 0.." + std::to_string(size_ - 1));
}

void raise_collective_failure(const std::shared_ptr<Liveness>& liveness, const std::vector<int>& members,
                              int global_rank, const std::string& op, const std::exception& e) {
  if (dynamic_cast<const PeerError*>(&e) || dynamic_cast<const CollectiveMismatchError*>(&e)) throw;
  const std::string loss = liveness ? liveness->describe_loss(members) : "";
  std::string msg = "rank " + std::to_string(global_rank) + ": " + op + " failed";
  msg += loss.empty() ? "" : ": " + loss;
  msg += std::string(" [") + e.what() + "]";
  if (!loss.empty()) throw PeerError(liveness->last_lost(), msg);
  if (const auto* late = dynamic_cast<const TimeoutError*>(&e)) throw TimeoutError(msg, late->ranks());
  throw BackendError(msg);
}

void Backend::raise_failure(const std::string& op, const std::exception& e) const {
  std::vector<int> members;
  for (int r = 0; r < size_; ++r) members.push_back(global_rank(r));
  raise_collective_failure(liveness_, members, global_rank(rank_), op, e);
}

void Backend::begin_timed() {
  timed_marks_.clear();
  timed_begin_ = std::chrono::steady_clock::now();
}

void Backend::mark() {
  timed_marks_.push_back(
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - timed_begin_).count());
}

std::vector<double> Backend::end_timed(std::chrono::milliseconds) { return std::move(timed_marks_); }

void Backend::unsupported(const char* op) const { throw BackendError("backend " + name() + " does not support " + op); }

void Backend::run(const CollectiveOp& op) { unsupported(collective_name(op.kind)); }
std::shared_ptr<Work> Backend::isend(const Tensor&, int, const SendOptions&) { unsupported("isend"); }
std::shared_ptr<Work> Backend::irecv(Tensor&, int, const SendOptions&) { unsupported("irecv"); }
std::shared_ptr<Backend> Backend::new_group(const std::vector<int>&) { unsupported("new_group"); }

void Backend::send(const Tensor& tensor, int dst, const SendOptions& opts) { isend(tensor, dst, opts)->wait(); }
void Backend::recv(Tensor& tensor, int src, const SendOptions& opts) { irecv(tensor, src, opts)->wait(); }

namespace {

CollectiveOp op_of(CollectiveKind kind, const CollectiveOptions& opts, const Tensor* in, Tensor* out, int root = -1,
                   ReduceOp reduce = ReduceOp::Sum) {
  CollectiveOp op;
  op.timeout = opts.timeout;
  op.kind = kind;
  op.in = in;
  op.out = out;
  op.root = root;
  op.reduce = reduce;
  return op;
}

}  // namespace

void Backend::broadcast(Tensor& tensor, const BroadcastOptions& opts) {
  run(op_of(CollectiveKind::Broadcast, opts, nullptr, &tensor, opts.root));
}
void Backend::all_reduce(Tensor& tensor, const AllreduceOptions& opts) {
  run(op_of(CollectiveKind::AllReduce, opts, nullptr, &tensor, -1, opts.op));
}
void Backend::reduce(Tensor& tensor, const ReduceOptions& opts) {
  run(op_of(CollectiveKind::Reduce, opts, nullptr, &tensor, opts.root, opts.op));
}
void Backend::all_gather(const Tensor& in, Tensor& out, const AllgatherOptions& opts) {
  run(op_of(CollectiveKind::AllGather, opts, &in, &out));
}
void Backend::gather(const Tensor& in, Tensor& out, const GatherOptions& opts) {
  run(op_of(CollectiveKind::Gather, opts, &in, &out, opts.root));
}
void Backend::scatter(const Tensor& in, Tensor& out, const ScatterOptions& opts) {
  run(op_of(CollectiveKind::Scatter, opts, &in, &out, opts.root));
}
void Backend::reduce_scatter(const Tensor& in, Tensor& out, const ReduceScatterOptions& opts) {
  run(op_of(CollectiveKind::ReduceScatter, opts, &in, &out, -1, opts.op));
}
void Backend::all_to_all(const Tensor& in, Tensor& out, const AllToAllOptions& opts) {
  CollectiveOp op = op_of(CollectiveKind::AllToAll, opts, &in, &out);
  op.send_counts = opts.send_counts;
  op.recv_counts = opts.recv_counts;
  run(op);
}
void Backend::barrier(const BarrierOptions& opts) { run(op_of(CollectiveKind::Barrier, opts, nullptr, nullptr)); }

void Backend::all_reduce_coalesced(std::vector<Tensor>& tensors, const AllreduceCoalescedOptions& opts) {
  // Pack consecutive tensors into buckets of about bucket_bytes (ScaleTorch's
  // all_reduce_params), reduce each bucket once, and unpack.
  size_t i = 0;
  while (i < tensors.size()) {
    const DType dt = tensors[i].dtype();
    size_t j = i, bytes = 0;
    while (j < tensors.size() && tensors[j].dtype() == dt &&
           (j == i || bytes + tensors[j].nbytes() <= opts.bucket_bytes))
      bytes += tensors[j++].nbytes();
    if (j == i + 1) {
      all_reduce(tensors[i], opts);
    } else {
      int64_t count = 0;
      for (size_t k = i; k < j; ++k) count += tensors[k].numel();
      Tensor bucket = Tensor::empty({count}, dt, tensors[i].device());
      int64_t at = 0;
      for (size_t k = i; k < j; ++k) {
        bucket.assign_slice(0, at, tensors[k].reshape({tensors[k].numel()}));
        at += tensors[k].numel();
      }
      all_reduce(bucket, opts);
      at = 0;
      for (size_t k = i; k < j; ++k) {
        tensors[k].copy_from(bucket.slice(0, at, tensors[k].numel()));
        at += tensors[k].numel();
      }
    }
    i = j;
  }
}

}  // namespace distrun
