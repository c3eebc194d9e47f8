#include "distrun/nccl/failure.hpp"

#include <string>

#include "distrun/backend/backend.hpp"
#include "distrun/core/error.hpp"

namespace distrun::nccl {

void FailureNamer::raise(const char* op, const std::exception& e) const {
  raise_collective_failure(liveness, members, global_rank, std::string("nccl ") + op, e);
}

}  // namespace distrun::nccl
