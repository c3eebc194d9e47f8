// Rendezvous of an NCCL communicator: rank 0 creates the unique id and every other rank reads
// it from the Store. Written over bytes, so that it can be tested with a fake id, a HashStore
// and ranks as threads, without NCCL or a device.
#pragma once
#include <chrono>
#include <functional>
#include <string>

#include "distrun/store/store.hpp"

namespace distrun::nccl {

/// The store key of the `seq`-th unique id exchanged through one store ("nccl/uid/<seq>"), so
/// that communicators made one after another never read each other's id.
std::string unique_id_key(int seq);

/// On rank 0: calls `make_id` and publishes the bytes under unique_id_key(seq). On other ranks:
/// waits up to `timeout` for them. Either way returns the id, after checking it has `id_size`
/// bytes (BackendError otherwise: ranks built against different NCCLs). TimeoutError names the
/// key and rank 0 when the id never comes.
std::string exchange_unique_id(Store& store, int seq, int rank, size_t id_size,
                               const std::function<std::string()>& make_id, std::chrono::milliseconds timeout);

}  // namespace distrun::nccl
