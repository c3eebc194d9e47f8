// The bench step: its keys and checks here, its timing loop in bench.cpp (run_bench),
// called as it is.
#include "distrun/scenario/check/validation.hpp"
#include "distrun/scenario/model/limits.hpp"
#include "distrun/scenario/model/op_table.hpp"
#include "distrun/scenario/ops/bench.hpp"
#include "distrun/scenario/ops/ops.hpp"
#include "distrun/scenario/ops/step_runner.hpp"

namespace distrun::scenario {

namespace {

void validate_bench(Validation& v, const Step& s) {
  const auto members = v.participants(s);
  const auto& b = s.args().more().bench;
  const DType dtype = b.dtype.value_or(v.scenario().dtype);
  if (auto why = reduce_op_refusal(b.reduce, dtype)) v.fail(s.mark, v.where(s) + ": " + *why);
  if (v.nccl()) {
    const bool reduces = bench_reduces(b.collective);
    if (auto why = nccl_dtype_refusal(dtype)) v.fail(s.mark, v.where(s) + ": " + *why);
    if (auto why = reduces ? nccl_reduce_refusal(b.reduce) : std::nullopt) v.fail(s.mark, v.where(s) + ": " + *why);
  }
  if (b.root < 0 || b.root >= v.world_size())
    v.fail(s.mark, v.where(s) + ": root " + std::to_string(b.root) + " is out of range for a world of " +
                       ranks_str(v.world_size()));
  if (std::find(members.begin(), members.end(), b.root) == members.end())
    v.fail(s.mark,
           v.where(s) + ": root " + std::to_string(b.root) + " is not a member of group '" + s.group.str() + "'");
  // A bench rank holds an input, an output and the expected values of its largest size.
  for (size_t k = 0; k < b.bytes.size(); ++k) {
    int64_t need = 0;
    if (__builtin_mul_overflow(b.bytes[k], int64_t(3), &need)) need = INT64_MAX;
    v.check_fits(need, s.mark,
                 v.where(s) + ": size " + human_bytes(double(b.bytes[k])) + " (input, output and expected values)");
  }
  if (b.collective == Op::SendRecv && members.size() < 2)
    v.fail(s.mark, v.where(s) + ": send_recv needs at least 2 ranks");
}

StepOutput run_bench_step(StepRunner& r, const Step& s, Backend& b) {
  const RunSettings& settings = r.settings();
  const int me = r.rank();
  BenchContext ctx;
  ctx.scenario = r.scenario().name;
  ctx.step = s.index;
  ctx.backend_name = settings.backend_name;
  ctx.device = settings.device;
  ctx.check = s.check;
  ctx.dtype = s.args().more().bench.dtype.value_or(r.scenario().dtype);
  // Rank 0 prints each row as its size completes; when rank 0 is not a member of the step's
  // group, the group's first member sends its table with the step's report.
  ctx.out = me == 0 ? settings.out : nullptr;
  const BenchResult res = run_bench(b, s.args().more().bench, ctx);
  StepReport report;
  if (b.rank() == 0) {
    report.records = res.rows;
    if (s.check) report.wrong = res.wrong;
    if (me != 0) report.text = res.table;
    if (res.wrong > 0 && s.check)
      report.problems.push_back("check failed: " + step_where(s) + " " + op_name(s.args().more().bench.collective) +
                                ": " + std::to_string(res.wrong) + " wrong elements");
  }
  return {{}, {}, report};
}

}  // namespace

std::vector<OpSpec> bench_ops() {
  std::vector<OpSpec> ops;
  ops.push_back({Op::Bench,
                 "bench",
                 {"collective", "bytes", "dtype", "reduce", "iters", "warmup", "root"},
                 {"collective", "bytes"}});
  ops.back().result_at = ResultAt::None;
  ops.back().validate = validate_bench;
  ops.back().simulate = [](Reference&, const Step&) {};  // run_bench checks its own results
  ops.back().run = run_bench_step;
  return ops;
}

}  // namespace distrun::scenario
