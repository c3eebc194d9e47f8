// --numa-binding: which CPUs each local rank is bound to, from the NUMA nodes in /sys.
#pragma once
#include <string>
#include <vector>

#include "options.hpp"

namespace distrun::launcher {

/// Parses a kernel cpulist ("0-3,8,10-11"); empty on malformed input.
std::vector<int> parse_cpulist(const std::string& text);

/// CPUs per local rank for `mode` (empty when mode is none), read from `sys_root`
/// (/sys/devices/system). Local rank r uses NUMA node r * nodes / nproc (ranks spread over
/// the nodes in blocks; torch maps a rank to its GPU's node, which distrun does not yet read).
/// node: that node's CPUs; socket: every CPU of that node's package; exclusive: the node's
/// CPUs split evenly among the ranks on it. ConfigError when the host exposes no NUMA nodes.
std::vector<std::vector<int>> numa_cpu_sets(NumaBinding mode, int nproc,
                                            const std::string& sys_root = "/sys/devices/system");

}  // namespace distrun::launcher
