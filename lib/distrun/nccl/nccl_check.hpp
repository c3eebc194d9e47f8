// The one place for NCCL/CUDA version requirements and error checking. Every ncclResult_t and
// cudaError_t the NCCL backend gets goes through DISTRUN_NCCL_CHECK / DISTRUN_CUDA_CHECK, which
// throw a BackendError naming the call that failed and NCCL's or CUDA's own explanation.
#pragma once
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

#include "distrun/core/error.hpp"

// ncclCommSplit (groups) needs 2.18; ncclAvg 2.10; nonblocking communicators 2.14.
#define DISTRUN_NCCL_MIN_VERSION NCCL_VERSION(2, 18, 0)
static_assert(NCCL_VERSION_CODE >= DISTRUN_NCCL_MIN_VERSION,
              "distrun's NCCL backend needs NCCL 2.18 or newer (ncclCommSplit, ncclAvg, nonblocking init)");
static_assert(CUDART_VERSION >= 11000, "distrun's NCCL backend needs CUDA 11 or newer (bfloat16)");

namespace distrun::nccl {

/// The function name of a call's source text: "ncclAllReduce" for "ncclAllReduce(buf, ...)".
inline std::string call_name(const char* call) {
  std::string s(call);
  return s.substr(0, s.find('('));
}

/// "ncclAllReduce(...) failed: unhandled system error (<NCCL's last error>)" for `call`.
inline std::string nccl_error_message(const char* call, ncclResult_t r, ncclComm_t comm = nullptr) {
  std::string msg = call_name(call) + " failed: " + ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last && *last) msg += std::string(" (") + last + ")";
  return msg;
}

/// "cudaMalloc(...) failed: out of memory" for `call`.
inline std::string cuda_error_message(const char* call, cudaError_t e) {
  return call_name(call) + " failed: " + cudaGetErrorString(e);
}

/// Throws a BackendError for any result but success (and, when `in_progress_ok`, ncclInProgress,
/// which a nonblocking communicator returns for work it is still doing).
inline ncclResult_t nccl_check(ncclResult_t r, const char* call, bool in_progress_ok = false) {
  if (r == ncclSuccess || (in_progress_ok && r == ncclInProgress)) return r;
  throw BackendError(nccl_error_message(call, r));
}

/// Throws a BackendError unless `e` is cudaSuccess.
inline void cuda_check(cudaError_t e, const char* call) {
  if (e != cudaSuccess) throw BackendError(cuda_error_message(call, e));
}

/// Throws a BackendError when the NCCL library loaded at run time has another major version, or
/// is older than the headers distrun was built with (symbols may be missing or differ).
inline void check_runtime_version() {
  int v = 0;
  nccl_check(ncclGetVersion(&v), "ncclGetVersion");
  // NCCL_VERSION_CODE is major*10000 + minor*100 + patch since 2.9.
  if (v / 10000 != NCCL_VERSION_CODE / 10000 || v < DISTRUN_NCCL_MIN_VERSION)
    throw BackendError("backend nccl: the NCCL library loaded is version " + std::to_string(v) +
                       ", distrun was built against " + std::to_string(NCCL_VERSION_CODE) + " and needs at least " +
                       std::to_string(DISTRUN_NCCL_MIN_VERSION));
}

/// True when the NCCL library loaded at run time is `version` (NCCL_VERSION(...)) or newer: the
/// headers may offer a call (e.g. 2.28's ncclGather) that an older library lacks.
inline bool runtime_has(int version) {
  static const int loaded = [] {
    int v = 0;
    return ncclGetVersion(&v) == ncclSuccess ? v : 0;
  }();
  return loaded >= version;
}

/// NCCL 2.28 added ncclGather, ncclScatter and ncclAlltoAll; before, they are group calls of
/// ncclSend/ncclRecv (as torch does).
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
#define DISTRUN_NCCL_HAS_NATIVE_ROOTED 1
inline bool native_gather_scatter_all_to_all() { return runtime_has(NCCL_VERSION(2, 28, 0)); }
#else
#define DISTRUN_NCCL_HAS_NATIVE_ROOTED 0
inline bool native_gather_scatter_all_to_all() { return false; }
#endif

}  // namespace distrun::nccl

/// Checks an NCCL call, naming it in the error: DISTRUN_NCCL_CHECK(ncclGetUniqueId(&id)).
#define DISTRUN_NCCL_CHECK(call) ::distrun::nccl::nccl_check((call), #call)
/// As DISTRUN_NCCL_CHECK, but ncclInProgress (nonblocking communicator) is not an error.
#define DISTRUN_NCCL_CHECK_ASYNC(call) ::distrun::nccl::nccl_check((call), #call, true)
/// Checks a CUDA runtime call, naming it in the error: DISTRUN_CUDA_CHECK(cudaSetDevice(d)).
#define DISTRUN_CUDA_CHECK(call) ::distrun::nccl::cuda_check((call), #call)
