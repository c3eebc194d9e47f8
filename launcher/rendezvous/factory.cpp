// The one place that knows which kinds of rendezvous there are.
#include <algorithm>

#include "elastic.hpp"
#include "etcd.hpp"
#include "job_secret.hpp"
#include "one_node.hpp"
#include "static_nodes.hpp"

namespace distrun::launcher {

std::unique_ptr<Rendezvous> make_rendezvous(const JobPlan& plan, const RendezvousOptions& options,
                                            SignalWatch& signals) {
  const bool etcd = options.backend == "etcd" || options.backend == "etcd-v2";
  if (!etcd && options.backend != "static" && options.backend != "c10d")
    throw ConfigError("--rdzv-backend " + options.backend + ": not a rendezvous backend (static, c10d, etcd, etcd-v2)");
  // etcd's endpoint lists the cluster's members; every other kind's names node 0.
  if (etcd) {
    if (options.endpoint.empty() || !plan.elastic())
      throw ConfigError("--rdzv-backend " + options.backend +
                        " needs --rdzv-endpoint HOST:PORT[,HOST:PORT...] of the etcd cluster and an elastic --nnodes "
                        "MIN:MAX");
    return std::make_unique<EtcdRendezvous>(plan, options, signals);
  }
  if (options.endpoint.find(',') != std::string::npos)
    throw ConfigError("--rdzv-endpoint " + options.endpoint +
                      ": a list of members is an etcd cluster's (--rdzv-backend etcd); give node 0's HOST:PORT");
  if (plan.single_node()) return std::make_unique<OneNodeRendezvous>(plan, options);
  if (plan.elastic()) return std::make_unique<ElasticRendezvous>(plan, options, signals);
  return std::make_unique<StaticRendezvous>(plan, options, signals);
}

std::optional<std::string> rendezvous_secret(const LaunchOptions& o, const JobPlan& plan, const EnvLookup& env) {
  std::optional<std::string> secret = load_job_secret(o.rdzv_secret_file, env);
  if (plan.single_node()) return secret;
  if (!secret) {
    if (!o.check_only) throw ConfigError(missing_secret_message());
    return secret;
  }
  check_secret_strength(*secret, o.rdzv_secret_file.empty() ? "DISTRUN_STORE_SECRET"
                                                            : "--rdzv-secret-file " + o.rdzv_secret_file);
  return secret;
}

void tell_cannot_join(const JobPlan& plan, const RendezvousOptions& options, SignalWatch& signals,
                      const std::string& why) {
  // Only a static node other than node 0 has someone waiting for it (an elastic round goes on
  // without it).
  if (plan.single_node() || plan.elastic() || plan.node_rank == 0 || options.secret.empty()) return;
  RendezvousOptions brief = options;
  brief.timeout = std::min(options.timeout, std::chrono::milliseconds(5000));
  try {
    StaticRendezvous(plan, brief, signals).refuse(0, why);
  } catch (const std::exception&) {
    // Node 0 not reachable in time: it ends at its rendezvous timeout, naming this node.
  }
}

}  // namespace distrun::launcher
