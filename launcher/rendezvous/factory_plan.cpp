// The factory's other half: what each kind of job allows of the plan, kept apart from
// make_rendezvous so that the plan's parsers (and their fuzz target) need no rendezvous.
#include "rendezvous.hpp"

namespace distrun::launcher {

void fit_plan_to_kind(JobPlan& plan, const LaunchOptions& o) {
  if (!plan.elastic()) return;
  if (plan.source != "pytorch")
    throw ConfigError("--nnodes " + o.nnodes + ": an elastic range needs --launcher pytorch (under " + plan.source +
                      " the job's own variables fix the nodes)");
  if (o.mode == RunMode::scenario)
    throw ConfigError("--nnodes " + o.nnodes +
                      ": an elastic range runs programs only (a scenario is checked for one world size before it "
                      "starts); give N nodes");
  plan.node_rank = 0;
}

}  // namespace distrun::launcher
