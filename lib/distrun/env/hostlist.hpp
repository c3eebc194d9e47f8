// SLURM hostlist expressions: "node[01-04,07]", "rack[1-2]-n[01-02]", "a,b[1-3]".
#pragma once
#include <string>
#include <vector>

namespace distrun {

/// Expands a hostlist into host names in SLURM's order (zero padding kept, ranges ascending,
/// several bracket groups as a product, leftmost varying slowest). ConfigError when malformed
/// or when it would expand to more than `limit` hosts.
std::vector<std::string> expand_hostlist(const std::string& expr, size_t limit = 1u << 20);

/// The reverse: SLURM's compressed form of `hosts` ("node[01-03,07],login1"), each host once
/// (what `scontrol show hostlist` prints, e.g. for `sbatch --exclude`).
std::string compress_hostlist(const std::vector<std::string>& hosts);

}  // namespace distrun
