#include "distrun/scenario/ops/step_runner.hpp"

#include "distrun/scenario/ops/ops.hpp"

namespace distrun::scenario {

std::string step_where(const Step& s) { return "step " + std::to_string(s.index) + " (" + op_name(s.op) + ")"; }

Tensor to_cpu(const Tensor& t) { return t.defined() && t.device().is_cuda() ? t.to(Device::cpu()) : t; }

}  // namespace distrun::scenario
