#include "distrun/scenario/model/op_table.hpp"

namespace distrun::scenario {

const std::vector<OpSpec>& op_table() {
  static const std::vector<OpSpec> table = [] {
    std::vector<OpSpec> all;
    for (auto group : {collective_ops, local_ops, object_ops, bench_ops})
      for (auto& spec : group()) all.push_back(std::move(spec));
    return all;
  }();
  return table;
}

const OpSpec& op_spec(Op op) {
  for (const auto& s : op_table())
    if (s.op == op) return s;
  throw Error(std::string("internal: op ") + std::to_string(int(op)) + " has no entry in the op table");
}

const char* op_name(Op op) { return op_spec(op).name; }

std::vector<std::string> op_names() {
  std::vector<std::string> out;
  for (const auto& s : op_table()) out.emplace_back(s.name);
  return out;
}

std::optional<Op> parse_op(const std::string& name) {
  for (const auto& s : op_table())
    if (name == s.name) return s.op;
  return std::nullopt;
}

bool is_object_op(Op op) { return op_spec(op).object_result; }

}  // namespace distrun::scenario
