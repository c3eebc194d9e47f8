// The object collectives: any YAML value, with ${expr} filled in per rank, gathered or
// broadcast as JSON. Non-finite numbers cross the wire tagged (json_values.hpp), so a rank's
// inf or nan arrives as itself.
#include "distrun/comm/collectives.hpp"
#include "distrun/scenario/check/validation.hpp"
#include "distrun/scenario/model/op_table.hpp"
#include "distrun/scenario/ops/ops.hpp"
#include "distrun/scenario/ops/step_runner.hpp"
#include "distrun/scenario/output/explain.hpp"
#include "distrun/scenario/output/json_values.hpp"

namespace distrun::scenario {

namespace {

nlohmann::ordered_json mine(StepRunner& r, const Step& s) {
  return encode_nonfinite(substitute_object(s.args().more().object, r.env()));
}

nlohmann::ordered_json as_list(const std::vector<nlohmann::ordered_json>& got) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const auto& o : got) list.push_back(decode_nonfinite(o));
  return list;
}

// Every member's object, in member order, as the reference computes it.
nlohmann::ordered_json simulated_list(Reference& ref, const Step& s, const std::vector<int>& members) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (int r : members) list.push_back(substitute_object(s.args().more().object, ref.env(r)));
  return list;
}

}  // namespace

std::vector<OpSpec> object_ops() {
  std::vector<OpSpec> ops;
  ops.push_back({Op::AllGatherObject, "all_gather_object", {"object"}, {"object"}, true});
  ops.back().validate = [](Validation&, const Step&) {};
  ops.back().simulate = [](Reference& ref, const Step& s) {
    const auto members = ref.participants(s);
    const auto list = simulated_list(ref, s, members);
    for (int r : members) ref.set_object(s, r, list);
  };
  ops.back().run = [](StepRunner& r, const Step& s, Backend& b) {
    return StepOutput{{}, as_list(all_gather_object(b, mine(r, s))), {}};
  };
  ops.back().picture = [](const Step& s, const std::vector<int>& m) { return gather_picture(s, m, -1); };

  ops.push_back({Op::GatherObject, "gather_object", {"object", "dst"}, {"object"}, true});
  ops.back().result_at = ResultAt::Dst;
  ops.back().validate = [](Validation& v, const Step& s) {
    v.member_index(s, v.participants(s), s.args().dst, s.at(s.args().dst_mark), "dst");
  };
  ops.back().simulate = [](Reference& ref, const Step& s) {
    ref.set_object(s, s.args().dst, simulated_list(ref, s, ref.participants(s)));
  };
  ops.back().run = [](StepRunner& r, const Step& s, Backend& b) {
    auto got = gather_object(b, mine(r, s), b.group_rank(s.args().dst));
    if (r.rank() != s.args().dst) return StepOutput{};
    return StepOutput{{}, as_list(got), {}};
  };
  ops.back().picture = [](const Step& s, const std::vector<int>& m) { return gather_picture(s, m, s.args().dst); };

  ops.push_back({Op::BroadcastObject, "broadcast_object", {"object", "src"}, {"object"}, true});
  ops.back().validate = [](Validation& v, const Step& s) {
    v.member_index(s, v.participants(s), s.args().src, s.at(s.args().src_mark), "src");
  };
  ops.back().simulate = [](Reference& ref, const Step& s) {
    const auto members = ref.participants(s);
    const nlohmann::ordered_json obj = substitute_object(s.args().more().object, ref.env(s.args().src));
    for (int r : members) ref.set_object(s, r, obj);
  };
  ops.back().run = [](StepRunner& r, const Step& s, Backend& b) {
    return StepOutput{{}, decode_nonfinite(broadcast_object(b, mine(r, s), b.group_rank(s.args().src))), {}};
  };
  ops.back().picture = [](const Step& s, const std::vector<int>& m) { return whole_from(s, m, s.args().src, false); };
  return ops;
}

}  // namespace distrun::scenario
