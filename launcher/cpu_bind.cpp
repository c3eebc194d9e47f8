#include "cpu_bind.hpp"

#include <sched.h>

namespace distrun::launcher {

std::vector<std::vector<int>> cpu_shares(CpuBind mode, int nproc, const std::vector<int>& allowed) {
  const int n = int(allowed.size());
  if (mode == CpuBind::none || nproc < 1 || n == 0) return {};
  // Ranks that share CPUs anyway are better left to the scheduler: bound two to a core, a rank
  // waits for its core-mate while the other core runs something else.
  if (mode == CpuBind::auto_ && nproc > n) return {};
  std::vector<std::vector<int>> out(static_cast<size_t>(nproc));
  for (int r = 0; r < nproc; ++r) {
    if (nproc > n) {
      out[size_t(r)] = {allowed[size_t(r % n)]};
      continue;
    }
    // Shares of n / nproc CPUs, the remainder spread over the first ranks.
    const int begin = r * n / nproc, end = (r + 1) * n / nproc;
    out[size_t(r)].assign(allowed.begin() + begin, allowed.begin() + end);
  }
  return out;
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

}  // namespace distrun::launcher
