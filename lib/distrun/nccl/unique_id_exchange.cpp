#include "distrun/nccl/unique_id_exchange.hpp"

#include "distrun/core/error.hpp"

namespace distrun::nccl {

int next_comm_sequence(Store& store, int rank) { return int(store.add("nccl/seq/" + std::to_string(rank), 1) - 1); }

std::string unique_id_key(int seq, const std::string& what) { return unique_id_key(std::to_string(seq), what); }

std::string unique_id_key(const std::string& comm_tag, const std::string& what) {
  return "nccl/uid/" + comm_tag + (what.empty() ? "" : "/" + what);
}

std::string exchange_unique_id(Store& store, const std::string& key, int rank, int creator, size_t id_size,
                               const std::function<std::string()>& make_id, std::chrono::milliseconds timeout) {
  std::string id;
  if (rank == creator) {
    id = make_id();
    // Checked before publishing too, so that a bad id fails on its creator rather than elsewhere.
    if (id.size() != id_size)
      throw BackendError("backend nccl: unique id made by rank " + std::to_string(rank) + " has " +
                         std::to_string(id.size()) + " bytes, expected " + std::to_string(id_size));
    store.set(key, id);
    return id;
  }
  try {
    store.wait({key}, timeout);
  } catch (const TimeoutError& e) {
    throw TimeoutError("backend nccl: rank " + std::to_string(rank) + " waited " + std::to_string(timeout.count()) +
                       " ms for rank " + std::to_string(creator) + "'s NCCL unique id under '" + key + "' [" +
                       e.what() + "]");
  }
  id = store.get(key);
  if (id.size() != id_size)
    throw BackendError("backend nccl: unique id under '" + key + "' has " + std::to_string(id.size()) +
                       " bytes, expected " + std::to_string(id_size) +
                       " (sizeof(ncclUniqueId)); is every rank running the same NCCL build?");
  return id;
}

}  // namespace distrun::nccl
