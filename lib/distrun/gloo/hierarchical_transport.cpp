#include "distrun/gloo/hierarchical_transport.hpp"

#include "distrun/gloo/gloo_backend.hpp"

namespace distrun {

HierarchicalTransport::HierarchicalTransport(std::unique_ptr<TcpTransport> flat, std::shared_ptr<GlooBackend> local,
                                             std::shared_ptr<GlooBackend> cross)
    : flat_(std::move(flat)), local_(std::move(local)), cross_(std::move(cross)) {}

HierarchicalTransport::~HierarchicalTransport() = default;

std::string HierarchicalTransport::name() const {
  return "hierarchical(" + local_->transport_name() + " x" + std::to_string(local_->size()) + ", " +
         cross_->transport_name() + " x" + std::to_string(cross_->size()) + ")";
}

void HierarchicalTransport::all_reduce(Intent intent, void* data, size_t es, ReduceFn fn,
                                       std::chrono::milliseconds timeout) {
  const size_t k = size_t(local_->size());
  const size_t count = intent.bytes / es, slice = count / k;
  // Fewer elements than ranks on a host: nothing to split, and nothing worth it.
  if (slice == 0) return flat_->all_reduce(intent, data, es, fn, timeout);
  flat_->agree(intent, timeout);
  const size_t slice_bytes = slice * es;
  if (slice_.size() < slice_bytes) slice_.resize(slice_bytes);
  Intent step = intent;
  step.bytes = slice_bytes;
  step.kind = CollectiveKind::ReduceScatter;
  local_->transport().reduce_scatter(step, data, slice_.data(), es, fn, timeout);
  step.kind = CollectiveKind::AllReduce;
  cross_->transport().all_reduce(step, slice_.data(), es, fn, timeout);
  step.kind = CollectiveKind::AllGather;
  local_->transport().all_gather(step, slice_.data(), data, timeout);
  // The last count % k elements (fewer than k) did not fit a slice: flat, and tiny.
  if (const size_t tail = count - slice * k) {
    Intent rest = intent;
    rest.bytes = tail * es;
    flat_->all_reduce(rest, static_cast<char*>(data) + slice_bytes * k, es, fn, timeout);
  }
}

}  // namespace distrun
