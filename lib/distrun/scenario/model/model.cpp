#include "distrun/scenario/model/model.hpp"

#include <cstring>

namespace distrun::scenario {

const StepArgs Step::kDefaultArgs{};

void Literals::push_back(const Literal& l) {
  uint64_t bits = 0;
  if (l.integer)
    bits = uint64_t(*l.integer);
  else
    std::memcpy(&bits, &l.real, sizeof bits);
  bits_.push_back(bits);
  integer_.push_back(l.integer.has_value());
}

Literal Literals::operator[](size_t i) const {
  if (integer_[i]) {
    const auto v = int64_t(bits_[i]);
    return {double(v), v};
  }
  Literal l;
  std::memcpy(&l.real, &bits_[i], sizeof l.real);
  return l;
}

const Group* Scenario::find_group(const std::string& group_name) const {
  for (const auto& g : groups)
    if (g.name == group_name) return &g;
  return nullptr;
}

}  // namespace distrun::scenario
