// --cpu-bind: which CPUs each local rank runs on when no --numa-binding is given.
#pragma once
#include <vector>

namespace distrun::launcher {

/// --cpu-bind none|core|auto. core: each local rank gets its own equal share of the CPUs the
/// launcher may use (as srun --cpu-bind=cores with --cpus-per-task), round robin when there are
/// more ranks than CPUs; auto (the default): core when every rank gets at least one CPU of its
/// own, none otherwise.
enum class CpuBind { none, core, auto_ };

/// CPUs per local rank for `mode` out of `allowed` (the launcher's affinity, ascending); empty:
/// no binding.
std::vector<std::vector<int>> cpu_shares(CpuBind mode, int nproc, const std::vector<int>& allowed);

/// The CPUs this process may run on, ascending.
std::vector<int> allowed_cpus();

}  // namespace distrun::launcher
