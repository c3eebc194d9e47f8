#include "distrun/scenario/model/model.hpp"

namespace distrun::scenario {

const StepArgs Step::kDefaultArgs{};

const Group* Scenario::find_group(const std::string& group_name) const {
  for (const auto& g : groups)
    if (g.name == group_name) return &g;
  return nullptr;
}

}  // namespace distrun::scenario
