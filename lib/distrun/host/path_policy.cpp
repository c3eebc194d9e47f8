#include "distrun/host/path_policy.hpp"

#include <algorithm>

#include "distrun/core/error.hpp"

namespace distrun {

PathChoice choose_path(const std::vector<GroupMember>& members, int rank, PathPreference preference,
                       Hierarchy hierarchy, const std::function<bool()>& map_segment) {
  const int size = int(members.size());
  if (size < 2) return {};
  std::string differ;
  for (int r = 1; r < size; ++r)
    if (members[size_t(r)].settings != members[0].settings)
      differ += ", rank " + std::to_string(members[size_t(r)].global_rank) + " has " + members[size_t(r)].settings;
  if (!differ.empty())
    throw ConfigError(
        "the members of a group must share DISTRUN_TRANSPORT, DISTRUN_ALGO, DISTRUN_HIERARCHY, "
        "DISTRUN_TCP and DISTRUN_SHM_INLINE_BYTES: rank " +
        std::to_string(members[0].global_rank) + " has " + members[0].settings + differ);
  if (preference == PathPreference::Tcp) return {};
  std::vector<std::string> hosts;  // distinct, in order of their first rank
  PathChoice hierarchical{PathChoice::Hierarchical, {}, 0, 0};
  auto& on = hierarchical.ranks_on_host;
  for (int r = 0; r < size; ++r) {
    const size_t at = size_t(std::find(hosts.begin(), hosts.end(), members[size_t(r)].host) - hosts.begin());
    if (at == hosts.size()) hosts.push_back(members[size_t(r)].host), on.emplace_back();
    if (r == rank) hierarchical.host = int(at), hierarchical.slice = int(on[at].size());
    on[at].push_back(r);
  }
  if (hosts.size() == 1 && map_segment()) return {PathChoice::SharedMemory, {}, 0, 0};
  if (preference == PathPreference::SharedMemory)
    throw BackendError(
        "DISTRUN_TRANSPORT=shm: the members of this group cannot read each other's memory "
        "(other hosts, other PID namespaces, or ptrace restrictions)");
  const size_t k = on[0].size();
  const bool even = std::all_of(on.begin(), on.end(), [&](const std::vector<int>& v) { return v.size() == k; });
  if (hosts.size() == 1 || k < 2 || !even || hierarchy == Hierarchy::Flat) return {};
  return hierarchical;
}

}  // namespace distrun
