// The CUDA runtime and NCCL are loaded (dlopen) when something first needs them, never linked:
// libdistrun and every program start on a host without CUDA, where Gloo runs as anywhere else
// and asking for a CUDA device is a ConfigError saying what is missing and how to get it.
// cuda_api.cpp defines every CUDA runtime and NCCL function distrun calls, hidden inside
// libdistrun, each forwarding to the loaded library's; the rest of the code calls them by their
// own names from the vendors' headers.
#pragma once

namespace distrun::nccl {

enum class CudaLibrary { Runtime, Nccl };

/// Loads `lib` once (later calls return at once; a failure is remembered). The library's soname
/// is the major version of the headers distrun was built with (libcudart.so.13, libnccl.so.2),
/// looked up as the loader does (LD_LIBRARY_PATH, ld.so.cache, then the CUDA folders found at
/// build time, which are in libdistrun's run path). ConfigError naming the library, the
/// loader's reason and how to install it.
void load_cuda_library(CudaLibrary lib);

/// The address of function `name` in `lib`, loading it first. ConfigError when the library cannot
/// be loaded or lacks the function (an older release than the headers).
void* cuda_symbol(CudaLibrary lib, const char* name);

}  // namespace distrun::nccl
