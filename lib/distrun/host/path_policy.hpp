// Which path a group's collectives take, decided once when the group is made: a function of what
// its members told each other (their shared settings and their hosts), so that every member
// reaches the same verdict without another word.
//
// Each path describes itself once, in its own file of paths/: a PathEntry (its name, where the
// policy may choose it, how to build it for a group) registered when the library loads. The
// policy chooses among the registered entries and builds the one it chose (make_transport), so a
// new path is its own files and nothing else: the backend that makes a group only offers what
// paths build on (PathGroup: the group's store, Gloo's full mesh, distrun's sockets, a way to
// make inner groups) and asks for the group's collectives.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "distrun/host/algorithms.hpp"
#include "distrun/host/path.hpp"
#include "distrun/host/transport.hpp"
#include "distrun/store/store.hpp"

namespace gloo {
class Context;
}

namespace distrun {

class SocketMesh;

/// How the members of a group may move data (DISTRUN_TRANSPORT).
enum class PathPreference {
  Auto,          // a one-host path (shared memory) when every member is on this host and it builds, else TCP
  SharedMemory,  // a one-host path or an error: for tests and benchmarks that must not fall back
  Tcp,           // the TCP path (DISTRUN_TCP), even on one host
};
/// A group over several hosts with k > 1 ranks on each: all_reduce through the hosts' shared
/// memory and one TCP ring per slice (hierarchical_transport.hpp), or flat over TCP
/// (DISTRUN_HIERARCHY).
enum class Hierarchy { Auto, Flat };

/// The settings of the paths: all but host_id must be the same on every member of a group.
struct PathSettings {
  PathPreference transport = PathPreference::Auto;
  Algorithm algorithm = Algorithm::Auto;  // algorithms.hpp
  Hierarchy hierarchy = Hierarchy::Auto;
  /// Which path between hosts (DISTRUN_TCP): a registered entry's name; empty, the first.
  std::string tcp;
  /// The largest payload the shared-memory path copies through a rank's slot rather than
  /// exposing the buffer to single-copy reads (at most 64 KiB, its default): where copying
  /// stops paying, measured in docs/performance.md; settable for that measurement.
  uint64_t shm_inline_bytes = uint64_t(64) << 10;
  /// Which host this rank is on, as the group compares them: empty means this kernel's boot
  /// id. Ranks with different ids never share memory. Set (DISTRUN_HOST_ID) to make network
  /// namespaces, or threads of a test, behave as separate hosts.
  std::string host_id;

  /// Sets transport from DISTRUN_TRANSPORT (auto|shm|tcp; unset with DISTRUN_CMA=0: tcp),
  /// algorithm from DISTRUN_ALGO (auto|direct|ring), hierarchy from DISTRUN_HIERARCHY
  /// (auto|flat), tcp from DISTRUN_TCP (the names of the paths between hosts), shm_inline_bytes
  /// from DISTRUN_SHM_INLINE_BYTES (0..65536) and host_id from DISTRUN_HOST_ID; ConfigError
  /// otherwise.
  void read_env();
  /// The settings every member of a group must share, as text: a group whose members' differ is
  /// a ConfigError on every member when it is made.
  std::string shared_settings() const;
};

/// What a group offers the paths built for it; the backend that makes the group fills it in.
/// Every member builds at the same point, so a step that meets the peers (Gloo's mesh, a
/// shared segment) is taken by all of them together.
struct PathGroup {
  int rank = 0, size = 1;
  std::vector<int> global_ranks;
  std::shared_ptr<Store> store;  // the group's: a path keeps its keys under a prefix of its own
  PathSettings settings;
  std::function<std::shared_ptr<gloo::Context>()> gloo;  // Gloo's full mesh, connected at the first call
  std::function<std::shared_ptr<SocketMesh>()> sockets;  // distrun's sockets (paths/socket_mesh.hpp)
  std::function<uint32_t()> next_tag;                    // the group's next Gloo tag
  /// The collectives of an inner group of this one: the members `ranks` (group ranks, this one
  /// among them), meeting under the store prefix `prefix`, with `preference`.
  std::function<std::shared_ptr<CollectiveTransport>(const std::string& prefix, const std::vector<int>& ranks,
                                                     PathPreference preference)>
      subgroup;
};

/// A path, as the policy knows it.
struct PathEntry {
  /// Where the policy may choose it: OneHost paths are tried, lowest order first, when every
  /// member is on one host (and DISTRUN_TRANSPORT allows); a Hosts path goes anywhere, and
  /// DISTRUN_TCP names which one (the lowest order by default).
  enum Reach { OneHost, Hosts };
  std::string name;  // DISTRUN_TCP's word for a Hosts path; for messages
  Reach reach = Hosts;
  int order = 0;
  /// The path for `group`, or nullptr where this group cannot have it (a OneHost path whose
  /// members cannot reach each other's memory after all): the same answer on every member.
  std::function<std::unique_ptr<Path>(const PathGroup& group)> build;
};

/// Adds `entry` to the paths the policy chooses among (each path's file, when the library
/// loads); returns true, so that a file registers by initialising a constant.
bool register_path(PathEntry entry);
/// The registered paths, by order.
const std::vector<PathEntry>& registered_paths();

/// What one member of a group states when it is made.
struct GroupMember {
  int global_rank;       // for messages
  std::string settings;  // the settings every member must share, as text
  std::string host;      // which host it is on: members with different ids never share memory
};

struct PathChoice {
  /// The path of the group: the OneHost path that built, or the Hosts path to build (for a
  /// hierarchical group, the flat one over every host, for the kinds it does not compose).
  const PathEntry* path = nullptr;
  bool hierarchical = false;
  /// Hierarchical only: the group ranks on each host, hosts in the order of their first rank;
  /// this rank is ranks_on_host[host][slice].
  std::vector<std::vector<int>> ranks_on_host;
  int host = 0, slice = 0;
};

/// The path of the group whose members (in group rank order) stated `members`, for its rank
/// `rank`, under this rank's `settings` (the same on every member once their shared settings
/// agree). Members whose settings differ would run different schedules or paths on the two ends
/// of a pair: a ConfigError naming each difference. A group of one rank takes the TCP path
/// (which then moves nothing). `build_one_host` is asked only when every member is on one host
/// and such a path is allowed, for each OneHost path in order until it says it built one (a step
/// every member takes at the same point, having reached the same verdict so far); that path is
/// chosen exactly when it says yes. Where a one-host path is required and none builds, a
/// BackendError.
PathChoice choose_path(const std::vector<GroupMember>& members, int rank, const PathSettings& settings,
                       const std::function<bool(const PathEntry&)>& build_one_host);

/// The collectives of `group`: every member's settings and host exchanged through its store, the
/// verdict of choose_path (the same on all), and the path it names built, our algorithms over it
/// (or the hierarchical composition of inner groups, made through group.subgroup).
std::unique_ptr<CollectiveTransport> make_transport(const PathGroup& group);

/// This kernel's boot id: ranks with the same one are on one host (and may share memory).
std::string kernel_boot_id();

}  // namespace distrun
