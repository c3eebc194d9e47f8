#include "distrun/scenario/model.hpp"

namespace distrun::scenario {

namespace {
constexpr std::pair<Op, const char*> kOps[] = {
    {Op::Broadcast, "broadcast"},         {Op::Scatter, "scatter"},
    {Op::Gather, "gather"},               {Op::AllGather, "all_gather"},
    {Op::Reduce, "reduce"},               {Op::AllReduce, "all_reduce"},
    {Op::ReduceScatter, "reduce_scatter"}, {Op::AllToAll, "all_to_all"},
    {Op::SendRecv, "send_recv"},          {Op::Barrier, "barrier"},
    {Op::Map, "map"},                     {Op::AllGatherObject, "all_gather_object"},
    {Op::GatherObject, "gather_object"},  {Op::BroadcastObject, "broadcast_object"},
    {Op::Bench, "bench"},                 {Op::LocalReduce, "local_reduce"},
};
}  // namespace

const char* op_name(Op op) {
  for (const auto& [o, n] : kOps)
    if (o == op) return n;
  return "?";
}

std::vector<std::string> op_names() {
  std::vector<std::string> out;
  for (const auto& [o, n] : kOps) out.emplace_back(n);
  return out;
}

std::optional<Op> parse_op(const std::string& name) {
  for (const auto& [o, n] : kOps)
    if (name == n) return o;
  return std::nullopt;
}

bool is_object_op(Op op) {
  return op == Op::AllGatherObject || op == Op::GatherObject || op == Op::BroadcastObject;
}

const Group* Scenario::find_group(const std::string& group_name) const {
  for (const auto& g : groups)
    if (g.name == group_name) return &g;
  return nullptr;
}

}  // namespace distrun::scenario
