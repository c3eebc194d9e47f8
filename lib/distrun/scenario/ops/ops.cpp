#include "distrun/scenario/ops/ops.hpp"

namespace distrun::scenario {

const OpTable& op_table() {
  static const OpTable table = [] {
    std::vector<OpSpec> all;
    for (auto group : {collective_ops, local_ops, object_ops, bench_ops})
      for (auto& spec : group()) all.push_back(std::move(spec));
    return OpTable(std::move(all));
  }();
  return table;
}

const OpSpec& op_spec(Op op) { return op_table().spec(op); }

const char* op_name(Op op) { return op_spec(op).name; }

}  // namespace distrun::scenario
