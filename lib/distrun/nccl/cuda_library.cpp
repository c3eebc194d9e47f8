#include "distrun/nccl/cuda_library.hpp"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>

#include <string>

#include "distrun/core/error.hpp"

namespace distrun::nccl {

namespace {

struct Loaded {
  void* handle = nullptr;
  std::string error;  // why it could not be loaded, with what to do
};

constexpr int kCudaMajor = CUDART_VERSION / 1000;

std::string soname(CudaLibrary lib) {
  return lib == CudaLibrary::Runtime ? "libcudart.so." + std::to_string(kCudaMajor)
                                     : "libnccl.so." + std::to_string(NCCL_MAJOR);
}

std::string how_to_get(CudaLibrary lib) {
  const std::string cuda = std::to_string(kCudaMajor);
  if (lib == CudaLibrary::Runtime)
    return "install the CUDA " + cuda + " runtime (NVIDIA's cuda-cudart-" + cuda +
           "-* package or the CUDA toolkit) where the loader finds it (ldconfig, or LD_LIBRARY_PATH)";
  return "install NCCL " + std::to_string(NCCL_MAJOR) + ".18 or newer built for CUDA " + cuda +
         " (NVIDIA's libnccl2 package) where the loader finds it (ldconfig, or LD_LIBRARY_PATH)";
}

Loaded open(CudaLibrary lib) {
  Loaded l;
  const std::string name = soname(lib);
  // RTLD_GLOBAL: NCCL and code compiled against the runtime find the same libcudart.
  l.handle = dlopen(name.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (!l.handle) {
    const char* why = dlerror();
    l.error = std::string(lib == CudaLibrary::Runtime ? "the CUDA runtime" : "NCCL") + " (" + name +
              ") could not be loaded (" + (why ? why : "unknown reason") + "): " + how_to_get(lib);
  }
  return l;
}

const Loaded& loaded(CudaLibrary lib) {
  static const Loaded runtime = open(CudaLibrary::Runtime);
  if (lib == CudaLibrary::Runtime) return runtime;
  static const Loaded nccl = open(CudaLibrary::Nccl);
  return nccl;
}

}  // namespace

void load_cuda_library(CudaLibrary lib) {
  const Loaded& l = loaded(lib);
  if (!l.handle) throw ConfigError(l.error);
}

void* cuda_symbol(CudaLibrary lib, const char* name) {
  load_cuda_library(lib);
  void* f = dlsym(loaded(lib).handle, name);
  if (!f)
    throw ConfigError(std::string(name) + " is missing from " + soname(lib) +
                      ", which is older than the headers distrun was built with: " + how_to_get(lib));
  return f;
}

}  // namespace distrun::nccl
