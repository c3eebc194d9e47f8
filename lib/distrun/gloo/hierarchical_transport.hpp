// The path of a group that spans several hosts with the same number of ranks (k > 1) on each:
// all_reduce is hierarchical, everything else runs flat over Gloo's TCP pairs.
//
// all_reduce of S bytes, h hosts of k ranks: the ranks of a host reduce-scatter through
// their own (shared-memory) group, so local rank i holds slice i of its host's sum; the h
// ranks holding slice i (one per host) all-reduce it over TCP; each host then all-gathers its
// k finished slices. Every rank sends 2(h-1)/h * S/k bytes between hosts, k ranks per host:
// 2(h-1)/h * S per host, where the flat ring over all h*k ranks sends 2(hk-1)/(hk) * S across
// each host boundary it crosses (for 2 hosts x 2 ranks: S against 1.5 S, the 1.5x of
// docs/performance.md). Large buffers go in pieces, the TCP step of one piece (on a thread of
// its own) overlapping the shared-memory steps of the next and the previous. The whole group first agrees on the intent over TCP, so a mismatch is
// the same CollectiveMismatchError on every rank whichever host it comes from.
#pragma once
#include <memory>
#include <vector>

#include "distrun/gloo/tcp_transport.hpp"
#include "distrun/gloo/transport.hpp"

namespace distrun {

class GlooBackend;

class HierarchicalTransport : public CollectiveTransport {
 public:
  /// `flat`: the whole group over TCP; `local`: this rank's host (its rank there is the
  /// slice it owns); `cross`: the ranks that own the same slice, one per host.
  HierarchicalTransport(std::unique_ptr<TcpTransport> flat, std::shared_ptr<GlooBackend> local,
                        std::shared_ptr<GlooBackend> cross);
  ~HierarchicalTransport() override;

  /// e.g. "hierarchical(shm x2, tcp x2)": the host's path and size, then the hosts' path and count.
  std::string name() const override;
  void all_reduce(Intent intent, void* data, size_t element_size, ReduceFn fn, std::chrono::milliseconds timeout) override;

  // The rest are flat: they move no more data between hosts than a hierarchy would.
  void all_gather(Intent i, const void* in, void* out, std::chrono::milliseconds t) override { flat_->all_gather(i, in, out, t); }
  void gather(Intent i, const void* in, void* out, std::chrono::milliseconds t) override { flat_->gather(i, in, out, t); }
  void scatter(Intent i, const void* in, void* out, std::chrono::milliseconds t) override { flat_->scatter(i, in, out, t); }
  void broadcast(Intent i, void* data, std::chrono::milliseconds t) override { flat_->broadcast(i, data, t); }
  void reduce(Intent i, void* data, size_t es, ReduceFn fn, std::chrono::milliseconds t) override {
    flat_->reduce(i, data, es, fn, t);
  }
  void reduce_scatter(Intent i, const void* in, void* out, size_t es, ReduceFn fn, std::chrono::milliseconds t) override {
    flat_->reduce_scatter(i, in, out, es, fn, t);
  }
  void all_to_all(Intent i, const void* in, void* out, std::chrono::milliseconds t) override { flat_->all_to_all(i, in, out, t); }

 private:
  std::unique_ptr<TcpTransport> flat_;
  std::shared_ptr<GlooBackend> local_, cross_;
  std::vector<char> slice_;  // this rank's slice between the steps, kept across calls
};

}  // namespace distrun
