// Which path a group's collectives take, decided once when the group is made: a function of what
// its members told each other (their shared settings and their hosts), so that every member
// reaches the same verdict without another word. The backend that makes the group exchanges the
// members' statements and builds the path chosen (gloo/gloo_backend.cpp).
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace distrun {

/// How the members of a group may move data (DISTRUN_TRANSPORT).
enum class PathPreference {
  Auto,          // shared memory (paths/shm_path.hpp) when every member is on this host and readable, else TCP
  SharedMemory,  // shared memory or an error: for tests and benchmarks that must not fall back
  Tcp,           // TCP, even on one host
};
/// A group over several hosts with k > 1 ranks on each: all_reduce through the hosts' shared
/// memory and one TCP ring per slice (hierarchical_transport.hpp), or flat over TCP
/// (DISTRUN_HIERARCHY).
enum class Hierarchy { Auto, Flat };

/// What one member of a group states when it is made.
struct GroupMember {
  int global_rank;       // for messages
  std::string settings;  // the settings every member must share, as text
  std::string host;      // which host it is on: members with different ids never share memory
};

struct PathChoice {
  enum Kind { Tcp, SharedMemory, Hierarchical };
  Kind kind = Tcp;
  /// Hierarchical only: the group ranks on each host, hosts in the order of their first rank;
  /// this rank is ranks_on_host[host][slice].
  std::vector<std::vector<int>> ranks_on_host;
  int host = 0, slice = 0;
};

/// The path of the group whose members (in group rank order) stated `members`, for its rank
/// `rank`, under this rank's `preference` and `hierarchy` (the same on every member once their
/// settings agree). Members whose settings differ would run different schedules or paths on the
/// two ends of a pair: a ConfigError naming each difference. A group of one rank takes TCP
/// (which then moves nothing). `map_segment` is asked at most once, only when every member is on
/// one host and shared memory is allowed: it maps the group's shared segment (a step every member
/// takes at the same point, having reached the same verdict so far) and says whether it could;
/// SharedMemory is chosen exactly when it says yes. Where shared memory is required and cannot
/// be had, a BackendError.
PathChoice choose_path(const std::vector<GroupMember>& members, int rank, PathPreference preference,
                       Hierarchy hierarchy, const std::function<bool()>& map_segment);

}  // namespace distrun
