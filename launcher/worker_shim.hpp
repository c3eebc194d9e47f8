// The reaper shim between distrun and each worker, so that killing distrun (even with -9)
// leaves none of a worker's own children behind. distrun starts `distrun-shim --reaper-shim`
// (a fresh program, so the shim is single-threaded and free to allocate; distrun's own binary
// with that flag when distrun-shim is not installed beside it); the shim
// makes itself a child subreaper (PR_SET_CHILD_SUBREAPER), starts the worker, and when the
// worker ends, or distrun dies (its parent-death signal), it kills the worker and then every
// process that was reparented to it, round after round, until it has no child left.
#pragma once

namespace distrun::launcher {

/// argv[1] that makes distrun act as the shim.
inline constexpr const char* kShimFlag = "--reaper-shim";
/// Descriptors the spawner sets up for the shim.
inline constexpr int kShimListenFd = 3;  // the bound workers' port (rank 0 only)
inline constexpr int kShimStatusFd = 4;  // exec's errno goes back here (close-on-exec pipe)
inline constexpr int kShimArgvFd = 5;    // the worker's argv, NUL-separated, then EOF

/// The shim's main: returns (or ends with) the worker's own exit status or signal.
int run_reaper_shim(int argc, char** argv);

}  // namespace distrun::launcher
