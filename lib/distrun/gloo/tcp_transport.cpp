#include "distrun/gloo/tcp_transport.hpp"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/alltoallv.h>
#include <gloo/broadcast.h>
#include <gloo/context.h>
#include <gloo/gather.h>
#include <gloo/reduce.h>
#include <gloo/scatter.h>

#include <cstring>

#include "distrun/gloo/gloo_backend.hpp"
#include "distrun/gloo/ring.hpp"

namespace distrun {

namespace {

constexpr uint64_t kRingSlot = 0x4e5c000000000000ull;

DType dtype_of(const Intent& i) { return DType(i.dtype); }
size_t count_of(const Intent& i) { return size_t(i.bytes / dtype_size(dtype_of(i))); }

}  // namespace

TcpTransport::TcpTransport(std::shared_ptr<gloo::Context> context, int rank, int size, std::vector<int> global_ranks,
                           AllreduceAlgorithm algorithm, std::function<uint32_t()> next_tag)
    : context_(std::move(context)), rank_(rank), size_(size), global_ranks_(std::move(global_ranks)),
      algorithm_(algorithm), next_tag_(std::move(next_tag)) {}

void TcpTransport::agree(const Intent& mine, std::chrono::milliseconds timeout) {
  if (mine.flags & Intent::kAgreed) return;  // every member skips alike: same flags, same tags
  const size_t words = Intent::words(size_);
  std::vector<uint64_t> row(words, 0), all(words * size_t(size_));
  Intent stated = mine;
  stated.seq = ++seq_;
  stated.encode(row.data(), size_);
  gloo::AllgatherOptions o(context_);
  o.setInput(row.data(), words);
  o.setOutput(all.data(), all.size());
  o.setTag(next_tag_());
  o.setTimeout(timeout);
  gloo::allgather(o);
  std::vector<Intent> table;
  for (int r = 0; r < size_; ++r) table.push_back(Intent::decode(all.data() + words * size_t(r), size_));
  check_agreement(table, false, global_ranks_);
}

void TcpTransport::broadcast(Intent intent, void* data, std::chrono::milliseconds timeout) {
  agree(intent, timeout);
  gloo::BroadcastOptions o(context_);
  dispatch_storage(dtype_of(intent), [&](auto tag) { o.setOutput(static_cast<decltype(tag)*>(data), count_of(intent)); });
  o.setRoot(intent.root);
  o.setTag(next_tag_());
  o.setTimeout(timeout);
  gloo::broadcast(o);
}

void TcpTransport::all_reduce(Intent intent, void* data, size_t element_size, ReduceFn fn,
                              std::chrono::milliseconds timeout) {
  agree(intent, timeout);
  if (algorithm_ == AllreduceAlgorithm::Ring)
    return ring_all_reduce(RingPlan{context_.get(), rank_, size_, kRingSlot | next_tag_(), timeout, fn, element_size},
                           data, count_of(intent));
  gloo::AllreduceOptions o(context_);
  dispatch_storage(dtype_of(intent), [&](auto tag) { o.setOutput(static_cast<decltype(tag)*>(data), count_of(intent)); });
  o.setReduceFunction(fn);
  o.setTag(next_tag_());
  o.setTimeout(timeout);
  gloo::allreduce(o);
}

void TcpTransport::reduce(Intent intent, void* data, size_t, ReduceFn fn, std::chrono::milliseconds timeout) {
  agree(intent, timeout);
  gloo::ReduceOptions o(context_);
  dispatch_storage(dtype_of(intent), [&](auto tag) { o.setOutput(static_cast<decltype(tag)*>(data), count_of(intent)); });
  o.setRoot(intent.root);
  o.setReduceFunction(fn);
  o.setTag(next_tag_());
  o.setTimeout(timeout);
  gloo::reduce(o);
}

void TcpTransport::all_gather(Intent intent, const void* in, void* out, std::chrono::milliseconds timeout) {
  agree(intent, timeout);
  gloo::AllgatherOptions o(context_);
  dispatch_storage(dtype_of(intent), [&](auto tag) {
    using T = decltype(tag);
    o.setInput(const_cast<T*>(static_cast<const T*>(in)), count_of(intent));
    o.setOutput(static_cast<T*>(out), count_of(intent) * size_t(size_));
  });
  o.setTag(next_tag_());
  o.setTimeout(timeout);
  gloo::allgather(o);
}

void TcpTransport::gather(Intent intent, const void* in, void* out, std::chrono::milliseconds timeout) {
  agree(intent, timeout);
  gloo::GatherOptions o(context_);
  dispatch_storage(dtype_of(intent), [&](auto tag) {
    using T = decltype(tag);
    o.setInput(const_cast<T*>(static_cast<const T*>(in)), count_of(intent));
    if (rank_ == intent.root) o.setOutput(static_cast<T*>(out), count_of(intent) * size_t(size_));
  });
  o.setRoot(intent.root);
  o.setTag(next_tag_());
  o.setTimeout(timeout);
  gloo::gather(o);
}

void TcpTransport::scatter(Intent intent, const void* in, void* out, std::chrono::milliseconds timeout) {
  agree(intent, timeout);
  gloo::ScatterOptions o(context_);
  dispatch_storage(dtype_of(intent), [&](auto tag) {
    using T = decltype(tag);
    if (rank_ == intent.root) {
      std::vector<T*> blocks;
      for (int r = 0; r < size_; ++r) blocks.push_back(const_cast<T*>(static_cast<const T*>(in)) + size_t(r) * count_of(intent));
      o.setInputs(blocks, count_of(intent));
    }
    o.setOutput(static_cast<T*>(out), count_of(intent));
  });
  o.setRoot(intent.root);
  o.setTag(next_tag_());
  o.setTimeout(timeout);
  gloo::scatter(o);
}

void TcpTransport::reduce_scatter(Intent intent, const void* in, void* out, size_t element_size, ReduceFn fn,
                                  std::chrono::milliseconds timeout) {
  agree(intent, timeout);
  const size_t block = intent.bytes;
  if (block == 0) return;
  if (scratch_.size() < 2 * block) scratch_.resize(2 * block);
  ring_reduce_scatter(RingPlan{context_.get(), rank_, size_, kRingSlot | next_tag_(), timeout, fn, element_size}, in,
                      out, block, scratch_.data());
}

void TcpTransport::all_to_all(Intent intent, const void* in, void* out, std::chrono::milliseconds timeout) {
  agree(intent, timeout);
  const size_t es = dtype_size(dtype_of(intent));
  bool even = true;
  for (int j = 0; j < size_; ++j)
    even = even && intent.send_bytes[size_t(j)] == intent.send_bytes[0] && intent.recv_bytes[size_t(j)] == intent.send_bytes[0];
  dispatch_storage(dtype_of(intent), [&](auto tag) {
    using T = decltype(tag);
    T* i = const_cast<T*>(static_cast<const T*>(in));
    T* o_ = static_cast<T*>(out);
    if (even) {
      gloo::AlltoallOptions o(context_);
      o.setInput(i, intent.send_bytes[0] / es * size_t(size_));
      o.setOutput(o_, intent.recv_bytes[0] / es * size_t(size_));
      o.setTag(next_tag_());
      o.setTimeout(timeout);
      gloo::alltoall(o);
    } else {
      std::vector<int64_t> send, recv;
      for (int j = 0; j < size_; ++j) {
        send.push_back(int64_t(intent.send_bytes[size_t(j)] / es));
        recv.push_back(int64_t(intent.recv_bytes[size_t(j)] / es));
      }
      gloo::AlltoallvOptions o(context_);
      o.setInput(i, send);
      o.setOutput(o_, recv);
      o.setTag(next_tag_());
      o.setTimeout(timeout);
      gloo::alltoallv(o);
    }
  });
}

}  // namespace distrun
