// Rendezvous of an NCCL communicator: one rank (the creator) makes the unique id and the others
// read it from the Store. Written over bytes, so that it can be tested with a fake id, a
// HashStore and ranks as threads, without NCCL or a device.
#pragma once
#include <chrono>
#include <functional>
#include <string>

#include "distrun/store/store.hpp"

namespace distrun::nccl {

/// The sequence number of the next communicator this rank creates over `store`: 0, 1, 2, ...
/// Counted in the store itself (one counter per rank), so every backend made over one store gets
/// its own number, and ranks that create communicators in the same order (as they must) agree on
/// it without talking. Without it, a second communicator would read the first one's id and hang.
int next_comm_sequence(Store& store, int rank);

/// The store key of communicator `seq`'s unique id ("nccl/uid/<seq>"), or of one of its
/// point-to-point pair communicators ("nccl/uid/<seq>/<what>").
std::string unique_id_key(int seq, const std::string& what = "");
/// The same under a communicator's tag: "<seq>" for one made from a unique id, "<parent>.g<k>"
/// for the k-th new_group of `parent` (which every member of the parent numbers alike).
std::string unique_id_key(const std::string& comm_tag, const std::string& what = "");

/// On `creator`: calls `make_id` and publishes the bytes under `key`. On the other ranks: waits up
/// to `timeout` for them. Either way returns the id, after checking it has `id_size` bytes
/// (BackendError otherwise: ranks built against different NCCLs). TimeoutError names the key and
/// the creator when the id never comes.
std::string exchange_unique_id(Store& store, const std::string& key, int rank, int creator, size_t id_size,
                               const std::function<std::string()>& make_id, std::chrono::milliseconds timeout);

}  // namespace distrun::nccl
