#include "distrun/host/path_policy.hpp"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <fstream>

#include "distrun/core/error.hpp"
#include "distrun/host/hierarchical_transport.hpp"

namespace distrun {

namespace {

std::vector<PathEntry>& entries() {
  static std::vector<PathEntry> all;
  return all;
}

// The Hosts path named `name` (empty: the first), or nullptr.
const PathEntry* hosts_path(const std::string& name) {
  for (const auto& e : registered_paths())
    if (e.reach == PathEntry::Hosts && (name.empty() || e.name == name)) return &e;
  return nullptr;
}

// Each setting every member must share, as the words its variable accepts: the first is the
// default (what an unset variable means). read_env() parses them and shared_settings() writes
// them back, so the two cannot drift apart.
template <class T>
struct Word {
  const char* word;
  T value;
};
constexpr std::array<Word<PathPreference>, 3> kTransports{
    {{"auto", PathPreference::Auto}, {"shm", PathPreference::SharedMemory}, {"tcp", PathPreference::Tcp}}};
constexpr std::array<Word<Algorithm>, 3> kAlgorithms{
    {{"auto", Algorithm::Auto}, {"direct", Algorithm::Direct}, {"ring", Algorithm::Ring}}};
constexpr std::array<Word<Hierarchy>, 2> kHierarchies{{{"auto", Hierarchy::Auto}, {"flat", Hierarchy::Flat}}};

std::string env_value(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string one_of(const std::vector<std::string>& words) {
  std::string expected;
  for (size_t i = 0; i < words.size(); ++i)
    expected += (i == 0 ? "" : i + 1 == words.size() ? " or " : ", ") + words[i];
  return expected;
}

template <class T, size_t N>
T from_env(const char* variable, const std::array<Word<T>, N>& words) {
  const std::string given = env_value(variable);
  if (given.empty()) return words[0].value;
  std::vector<std::string> names;
  for (const auto& w : words) {
    if (given == w.word) return w.value;
    names.emplace_back(w.word);
  }
  throw ConfigError(std::string(variable) + "='" + given + "': expected " + one_of(names));
}

template <class T, size_t N>
const char* word_of(T value, const std::array<Word<T>, N>& words) {
  for (const auto& w : words)
    if (w.value == value) return w.word;
  return words[0].word;
}

}  // namespace

bool register_path(PathEntry entry) {
  auto& all = entries();
  const auto at = std::upper_bound(all.begin(), all.end(), entry.order,
                                   [](int order, const PathEntry& e) { return order < e.order; });
  all.insert(at, std::move(entry));
  return true;
}

const std::vector<PathEntry>& registered_paths() { return entries(); }

void PathSettings::read_env() {
  // DISTRUN_CMA=0 is the older spelling of "TCP only", honoured while DISTRUN_TRANSPORT is unset.
  const bool cma_off = env_value("DISTRUN_TRANSPORT").empty() && env_value("DISTRUN_CMA") == "0";
  transport = cma_off ? PathPreference::Tcp : from_env("DISTRUN_TRANSPORT", kTransports);
  if (!env_value("DISTRUN_ALLREDUCE_ALGO").empty())
    throw ConfigError(
        "DISTRUN_ALLREDUCE_ALGO is gone: Gloo's own algorithms are no longer used; "
        "DISTRUN_ALGO=auto|direct|ring picks ours");
  algorithm = from_env("DISTRUN_ALGO", kAlgorithms);
  hierarchy = from_env("DISTRUN_HIERARCHY", kHierarchies);
  const std::string i = env_value("DISTRUN_SHM_INLINE_BYTES");
  if (!i.empty()) {
    if (i.size() > 6 || i.find_first_not_of("0123456789") != std::string::npos || std::stoull(i) > (64u << 10))
      throw ConfigError("DISTRUN_SHM_INLINE_BYTES='" + i + "': expected a number of bytes from 0 to 65536");
    shm_inline_bytes = std::stoull(i);
  }
  tcp = env_value("DISTRUN_TCP");
  if (!tcp.empty() && !hosts_path(tcp)) {
    std::vector<std::string> names;
    for (const auto& e : registered_paths())
      if (e.reach == PathEntry::Hosts) names.push_back(e.name);
    throw ConfigError("DISTRUN_TCP='" + tcp + "': expected " + one_of(names));
  }
  if (!env_value("DISTRUN_HOST_ID").empty()) host_id = env_value("DISTRUN_HOST_ID");
}

std::string PathSettings::shared_settings() const {
  const PathEntry* between = hosts_path(tcp);
  return std::string("DISTRUN_TRANSPORT=") + word_of(transport, kTransports) +
         " DISTRUN_ALGO=" + word_of(algorithm, kAlgorithms) + " DISTRUN_HIERARCHY=" + word_of(hierarchy, kHierarchies) +
         " DISTRUN_TCP=" + (between ? between->name : tcp) +
         " DISTRUN_SHM_INLINE_BYTES=" + std::to_string(shm_inline_bytes);
}

PathChoice choose_path(const std::vector<GroupMember>& members, int rank, const PathSettings& settings,
                       const std::function<bool(const PathEntry&)>& build_one_host) {
  const int size = int(members.size());
  PathChoice choice;
  choice.path = hosts_path(settings.tcp);
  if (!choice.path) throw ConfigError("DISTRUN_TCP='" + settings.tcp + "': no such path between hosts");
  if (size < 2) return choice;
  std::string differ;
  for (int r = 1; r < size; ++r)
    if (members[size_t(r)].settings != members[0].settings)
      differ += ", rank " + std::to_string(members[size_t(r)].global_rank) + " has " + members[size_t(r)].settings;
  if (!differ.empty())
    throw ConfigError(
        "the members of a group must share DISTRUN_TRANSPORT, DISTRUN_ALGO, DISTRUN_HIERARCHY, "
        "DISTRUN_TCP and DISTRUN_SHM_INLINE_BYTES: rank " +
        std::to_string(members[0].global_rank) + " has " + members[0].settings + differ);
  if (settings.transport == PathPreference::Tcp) return choice;
  std::vector<std::string> hosts;  // distinct, in order of their first rank
  auto& on = choice.ranks_on_host;
  for (int r = 0; r < size; ++r) {
    const size_t at = size_t(std::find(hosts.begin(), hosts.end(), members[size_t(r)].host) - hosts.begin());
    if (at == hosts.size()) hosts.push_back(members[size_t(r)].host), on.emplace_back();
    if (r == rank) choice.host = int(at), choice.slice = int(on[at].size());
    on[at].push_back(r);
  }
  if (hosts.size() == 1)
    for (const auto& e : registered_paths())
      if (e.reach == PathEntry::OneHost && build_one_host(e)) return {&e, false, {}, 0, 0};
  if (settings.transport == PathPreference::SharedMemory)
    throw BackendError(
        "DISTRUN_TRANSPORT=shm: the members of this group cannot read each other's memory "
        "(other hosts, other PID namespaces, or ptrace restrictions)");
  const size_t k = on[0].size();
  const bool even = std::all_of(on.begin(), on.end(), [&](const std::vector<int>& v) { return v.size() == k; });
  if (hosts.size() == 1 || k < 2 || !even || settings.hierarchy == Hierarchy::Flat)
    return {choice.path, false, {}, 0, 0};
  choice.hierarchical = true;
  return choice;
}

std::unique_ptr<CollectiveTransport> make_transport(const PathGroup& group) {
  // Every member's settings and host, in group rank order: the same table, hence the same
  // verdict, on all. A group of one has no one to tell.
  std::vector<GroupMember> members{{global_rank_of(group.global_ranks, group.rank), "", ""}};
  if (group.size > 1) {
    const std::string host = group.settings.host_id.empty() ? kernel_boot_id() : group.settings.host_id;
    group.store->set("members/" + std::to_string(group.rank), group.settings.shared_settings() + "\n" + host);
    members.clear();
    for (int r = 0; r < group.size; ++r) {
      const std::string m = group.store->get("members/" + std::to_string(r));
      members.push_back({global_rank_of(group.global_ranks, r), m.substr(0, m.find('\n')), m.substr(m.find('\n') + 1)});
    }
  }
  std::unique_ptr<Path> one_host;
  const PathChoice choice = choose_path(members, group.rank, group.settings, [&](const PathEntry& e) {
    one_host = e.build(group);
    return one_host != nullptr;
  });
  auto over = [&](std::unique_ptr<Path> path) {
    return std::make_unique<PathCollectives>(std::move(path), group.rank, group.size, group.settings.algorithm);
  };
  if (one_host) return over(std::move(one_host));
  if (!choice.hierarchical) return over(choice.path->build(group));
  // One group per host (its ranks meet through shared memory when they can) and one per slice
  // (the ranks at the same place on each host, over TCP); each made by its members only.
  const auto& on = choice.ranks_on_host;
  std::vector<int> cross;
  for (const auto& v : on) cross.push_back(v[size_t(choice.slice)]);
  auto local =
      group.subgroup("hier/host" + std::to_string(choice.host), on[size_t(choice.host)], group.settings.transport);
  auto across = group.subgroup("hier/slice" + std::to_string(choice.slice), cross, PathPreference::Tcp);
  return std::make_unique<HierarchicalTransport>(over(choice.path->build(group)), std::move(local), std::move(across),
                                                 on, choice.host, choice.slice);
}

std::string kernel_boot_id() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(f, id);
  return id;
}

}  // namespace distrun
