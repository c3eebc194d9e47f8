// The collectives over Gloo's TCP pairs (between hosts, or on one when shared memory cannot or
// must not be used): Gloo's algorithms, our ring (ring.hpp) for reduce_scatter and, when
// chosen, all_reduce. The intent check is one small all_gather before each collective.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "distrun/gloo/transport.hpp"

namespace gloo {
class Context;
}

namespace distrun {

enum class AllreduceAlgorithm;

class TcpTransport : public CollectiveTransport {
 public:
  /// `next_tag` gives the Gloo tag of each operation; `scratch(bytes)` a buffer of at least
  /// that size kept across calls (the ring's).
  TcpTransport(std::shared_ptr<gloo::Context> context, int rank, int size, std::vector<int> global_ranks,
               AllreduceAlgorithm algorithm, std::function<uint32_t()> next_tag);

  std::string name() const override { return "tcp"; }
  void all_gather(Intent intent, const void* in, void* out, std::chrono::milliseconds timeout) override;
  void gather(Intent intent, const void* in, void* out, std::chrono::milliseconds timeout) override;
  void scatter(Intent intent, const void* in, void* out, std::chrono::milliseconds timeout) override;
  void broadcast(Intent intent, void* data, std::chrono::milliseconds timeout) override;
  void all_reduce(Intent intent, void* data, size_t element_size, ReduceFn fn, std::chrono::milliseconds timeout) override;
  void reduce(Intent intent, void* data, size_t element_size, ReduceFn fn, std::chrono::milliseconds timeout) override;
  void reduce_scatter(Intent intent, const void* in, void* out, size_t element_size, ReduceFn fn,
                      std::chrono::milliseconds timeout) override;
  void all_to_all(Intent intent, const void* in, void* out, std::chrono::milliseconds timeout) override;

  /// Every rank's intent, checked before Gloo moves a byte: Gloo itself would notice a size
  /// disagreement only deep in a pair's receive (an abort, or a timeout on the other side).
  /// Public for the hierarchical path, which checks the whole group once before its steps.
  void agree(const Intent& mine, std::chrono::milliseconds timeout);

 private:

  std::shared_ptr<gloo::Context> context_;
  int rank_, size_;
  std::vector<int> global_ranks_;
  AllreduceAlgorithm algorithm_;
  std::function<uint32_t()> next_tag_;
  uint64_t seq_ = 0;
  std::vector<char> scratch_;  // the ring's, grown on demand and kept (fresh pages fault in again)
};

}  // namespace distrun
