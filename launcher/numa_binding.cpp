#include "numa_binding.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include "distrun/core/error.hpp"

namespace distrun::launcher {
namespace {

std::string read_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace

std::vector<int> parse_cpulist(const std::string& text) {
  std::vector<int> cpus;
  size_t at = 0;
  while (at < text.size()) {
    size_t comma = text.find(',', at);
    std::string item = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    at = comma == std::string::npos ? text.size() : comma + 1;
    size_t dash = item.find('-');
    try {
      int lo = std::stoi(item.substr(0, dash));
      int hi = dash == std::string::npos ? lo : std::stoi(item.substr(dash + 1));
      if (lo < 0 || hi < lo || hi > 1 << 16) return {};
      for (int c = lo; c <= hi; ++c) cpus.push_back(c);
    } catch (const std::exception&) {
      return {};
    }
  }
  return cpus;
}

std::vector<std::vector<int>> numa_cpu_sets(NumaBinding mode, int nproc, const std::string& sys_root) {
  if (mode == NumaBinding::none) return {};
  std::map<int, std::vector<int>> nodes;  // node id -> CPUs
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(sys_root + "/node", ec)) {
    std::string name = e.path().filename();
    if (name.rfind("node", 0) != 0 || name.size() == 4 || name.find_first_not_of("0123456789", 4) != std::string::npos)
      continue;
    auto cpus = parse_cpulist(read_line(e.path().string() + "/cpulist"));
    if (!cpus.empty()) nodes[std::stoi(name.substr(4))] = cpus;
  }
  if (nodes.empty())
    throw ConfigError("--numa-binding: this host exposes no NUMA information (no " + sys_root +
                      "/node/node*/cpulist with CPUs); run without --numa-binding");
  std::vector<std::vector<int>> node_cpus;
  for (auto& [id, cpus] : nodes) node_cpus.push_back(cpus);
  const int n = int(node_cpus.size());
  std::vector<std::vector<int>> out(static_cast<size_t>(nproc), std::vector<int>{});
  for (int r = 0; r < nproc; ++r) {
    int node = int(int64_t(r) * n / nproc);
    const auto& cpus = node_cpus[size_t(node)];
    if (mode == NumaBinding::node) {
      out[size_t(r)] = cpus;
    } else if (mode == NumaBinding::socket) {
      std::string package =
          read_line(sys_root + "/cpu/cpu" + std::to_string(cpus.front()) + "/topology/physical_package_id");
      for (const auto& other : node_cpus)
        for (int c : other)
          if (read_line(sys_root + "/cpu/cpu" + std::to_string(c) + "/topology/physical_package_id") == package)
            out[size_t(r)].push_back(c);
      std::sort(out[size_t(r)].begin(), out[size_t(r)].end());
    } else {  // exclusive: the ranks on this node share its CPUs out, none twice
      int first = 0, count = 0;
      for (int q = 0; q < nproc; ++q)
        if (int(int64_t(q) * n / nproc) == node) {
          if (count == 0) first = q;
          ++count;
        }
      size_t per = std::max<size_t>(1, cpus.size() / size_t(count));
      size_t begin = std::min(cpus.size() - 1, size_t(r - first) * per);
      size_t end = (r - first == count - 1) ? cpus.size() : std::min(cpus.size(), begin + per);
      out[size_t(r)].assign(cpus.begin() + long(begin), cpus.begin() + long(std::max(end, begin + 1)));
    }
  }
  return out;
}

}  // namespace distrun::launcher
