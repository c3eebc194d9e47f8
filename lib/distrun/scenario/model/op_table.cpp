#include "distrun/scenario/model/op_table.hpp"

namespace distrun::scenario {

const OpSpec& OpTable::spec(Op op) const {
  for (const auto& s : specs_)
    if (s.op == op) return s;
  throw Error(std::string("internal: op ") + std::to_string(int(op)) + " has no entry in the op table");
}

std::optional<Op> OpTable::parse(std::string_view name) const {
  for (const auto& s : specs_)
    if (name == s.name) return s.op;
  return std::nullopt;
}

std::vector<std::string> OpTable::names() const {
  std::vector<std::string> out;
  for (const auto& s : specs_) out.emplace_back(s.name);
  return out;
}

const OpSpec& Scenario::spec(Op op) const {
  if (!ops) throw Error("internal: a scenario without its op table");
  return ops->spec(op);
}

}  // namespace distrun::scenario
