// The path of a group that spans several hosts with the same number of ranks (k > 1) on each:
// all_reduce, all_gather, reduce_scatter and broadcast are hierarchical; gather, scatter,
// reduce and all_to_all run flat over the group's TCP path, and so do small ones of every kind
// where that path has a hub (fewer messages between hosts than the composition's check alone).
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
//
// all_gather of B bytes per rank: the h ranks at the same place on each host all-gather their
// blocks over TCP (each sends (h-1) B between hosts), then each host all-gathers those h-block
// sets through shared memory, and every rank puts the k*h blocks in group rank order: k(h-1) B
// leave a host, where the flat ring carries (hk-1) B across each boundary (2 B against 3 B for
// 2 hosts x 2 ranks). reduce_scatter is the mirror image: each host reduce-scatters its ranks'
// blocks grouped by the place on a host that will own them, then the h ranks at one place
// reduce-scatter their h partial blocks over TCP. broadcast: the root's place crosses the
// hosts (one copy per host), then each host broadcasts from that place through shared memory.
#pragma once
#include <memory>
#include <vector>

#include "distrun/host/algorithms.hpp"
#include "distrun/host/transport.hpp"

namespace distrun {

class HierarchicalTransport : public CollectiveTransport {
 public:
  /// What a composition runs its steps on, as the constructor's arguments say.
  struct Parts {
    std::unique_ptr<PathCollectives> flat;
    std::shared_ptr<CollectiveTransport> local, cross;
    std::vector<std::vector<int>> on;
    int host = 0, place = 0;
    // Kept across calls: this rank's slice between the steps (all_reduce), and the blocks
    // between all_gather's and reduce_scatter's steps.
    std::vector<char> slice, staged, gathered;
  };

  /// `flat`: the whole group over TCP; `local`: this rank's host (its rank there is the slice it
  /// owns); `cross`: the ranks that own the same slice, one per host. The two are the
  /// collectives of groups made by the layer above (which keeps them alive through the shared
  /// pointers); their sizes are read from `ranks_on_host`. `ranks_on_host[h]`: the group ranks
  /// on host h, in the order of their place there (the local group's ranks); this rank is
  /// ranks_on_host[host][place].
  HierarchicalTransport(std::unique_ptr<PathCollectives> flat, std::shared_ptr<CollectiveTransport> local,
                        std::shared_ptr<CollectiveTransport> cross, std::vector<std::vector<int>> ranks_on_host,
                        int host, int place);
  ~HierarchicalTransport() override;

  /// e.g. "hierarchical(shm x2, tcp x2)": the host's path and size, then the hosts' path and count.
  std::string name() const override;
  /// The kinds composed by hosts (a row each in hierarchical_transport.cpp's table: all_reduce,
  /// all_gather, reduce_scatter and broadcast) run their composition, unless small enough to
  /// go through the flat path's hub; the rest run flat: rooted
  /// ones move at most one copy between hosts either way, and all_to_all's blocks are all
  /// different, so nothing is shared within a host.
  void run(const HostOp& op, std::chrono::milliseconds timeout) override;

 private:
  Parts parts_;
};

}  // namespace distrun
