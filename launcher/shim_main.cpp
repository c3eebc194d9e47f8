// distrun-shim: the reaper shim (worker_shim.hpp) as a program of its own. It links nothing
// but the C++ runtime, so the launcher starts one per worker without loading libdistrun, Gloo,
// NCCL and CUDA's runtime each time (that made a 4-rank launch half again as slow).
#include "worker_shim.hpp"

int main(int argc, char** argv) { return distrun::launcher::run_reaper_shim(argc, argv); }
