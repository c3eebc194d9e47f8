#include "distrun/backend/op.hpp"

#include <string>

#include "distrun/core/error.hpp"

namespace distrun {

namespace {
constexpr uint32_t kKinds = std::size(kCollectiveForms);
}  // namespace

bool is_collective_kind(uint64_t k) { return k >= 1 && k <= kKinds; }

const CollectiveForm& form_of(CollectiveKind kind) {
  if (!is_collective_kind(uint64_t(kind)))
    throw BackendError("no collective of kind " + std::to_string(uint32_t(kind)));
  return kCollectiveForms[uint32_t(kind) - 1];
}

uint64_t larger_buffer(CollectiveKind kind, uint64_t bytes, size_t n) {
  const Buffers form = form_of(kind).buffers;
  return form == Buffers::Gathers || form == Buffers::Scatters ? bytes * n : bytes;
}

const char* collective_name(CollectiveKind kind) {
  return is_collective_kind(uint64_t(kind)) ? kCollectiveForms[uint32_t(kind) - 1].name : "an unknown collective";
}

const Tensor* CollectiveOp::block() const {
  switch (form().buffers) {
    case Buffers::None: return nullptr;
    case Buffers::InPlace:
    case Buffers::Scatters: return out;
    default: return in;
  }
}

}  // namespace distrun
