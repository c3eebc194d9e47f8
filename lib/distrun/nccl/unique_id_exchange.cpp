#include "distrun/nccl/unique_id_exchange.hpp"

#include "distrun/core/error.hpp"

namespace distrun::nccl {

std::string unique_id_key(int seq) { return "nccl/uid/" + std::to_string(seq); }

std::string exchange_unique_id(Store& store, int seq, int rank, size_t id_size,
                               const std::function<std::string()>& make_id, std::chrono::milliseconds timeout) {
  const std::string key = unique_id_key(seq);
  std::string id;
  if (rank == 0) {
    id = make_id();
    // Checked before publishing too, so that a bad id fails on rank 0 rather than everywhere else.
    if (id.size() != id_size)
      throw BackendError("backend nccl: unique id made by rank 0 has " + std::to_string(id.size()) +
                         " bytes, expected " + std::to_string(id_size));
    store.set(key, id);
    return id;
  }
  try {
    store.wait({key}, timeout);
  } catch (const TimeoutError& e) {
    throw TimeoutError("backend nccl: rank " + std::to_string(rank) + " waited " + std::to_string(timeout.count()) +
                       " ms for rank 0's NCCL unique id under '" + key + "' [" + e.what() + "]");
  }
  id = store.get(key);
  if (id.size() != id_size)
    throw BackendError("backend nccl: unique id under '" + key + "' has " + std::to_string(id.size()) +
                       " bytes, expected " + std::to_string(id_size) +
                       " (sizeof(ncclUniqueId)); is every rank running the same NCCL build?");
  return id;
}

}  // namespace distrun::nccl
