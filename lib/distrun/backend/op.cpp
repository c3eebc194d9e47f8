#include "distrun/backend/op.hpp"

#include <string>

#include "distrun/core/error.hpp"

namespace distrun {

namespace {

// By kind, in the enum's order from Broadcast.
constexpr CollectiveForm kForms[] = {
    {"broadcast", true, false, Buffers::InPlace},       {"all_reduce", false, true, Buffers::InPlace},
    {"reduce", true, true, Buffers::InPlace},           {"all_gather", false, false, Buffers::Gathers},
    {"gather", true, false, Buffers::Gathers},          {"scatter", true, false, Buffers::Scatters},
    {"reduce_scatter", false, true, Buffers::Scatters}, {"all_to_all", false, false, Buffers::Exchanges},
    {"barrier", false, false, Buffers::None},
};
constexpr uint32_t kKinds = sizeof kForms / sizeof kForms[0];
static_assert(uint32_t(CollectiveKind::Barrier) == kKinds, "a form for every kind, in order");

}  // namespace

bool is_collective_kind(uint64_t k) { return k >= 1 && k <= kKinds; }

const CollectiveForm& form_of(CollectiveKind kind) {
  if (!is_collective_kind(uint64_t(kind)))
    throw BackendError("no collective of kind " + std::to_string(uint32_t(kind)));
  return kForms[uint32_t(kind) - 1];
}

const char* collective_name(CollectiveKind kind) {
  return is_collective_kind(uint64_t(kind)) ? kForms[uint32_t(kind) - 1].name : "an unknown collective";
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
