#include "distrun/nccl/failure.hpp"

#include <string>

#include "distrun/core/error.hpp"

namespace distrun::nccl {

void FailureNamer::raise(const char* op, const std::exception& e) const {
  if (dynamic_cast<const PeerError*>(&e)) throw;
  std::string loss = liveness ? liveness->describe_loss(members) : "";
  std::string msg = "rank " + std::to_string(global_rank) + ": nccl " + op + " failed";
  msg += loss.empty() ? "" : ": " + loss;
  msg += std::string(" [") + e.what() + "]";
  if (!loss.empty()) throw PeerError(liveness->last_lost(), msg);
  if (dynamic_cast<const TimeoutError*>(&e)) throw TimeoutError(msg);
  throw BackendError(msg);
}

}  // namespace distrun::nccl
