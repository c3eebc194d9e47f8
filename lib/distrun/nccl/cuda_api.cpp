// The CUDA runtime and NCCL functions libdistrun calls, defined here with hidden visibility (the
// pragma covers the headers' declarations, so every object of libdistrun binds to these and
// none is exported): each looks its namesake up in the library loaded at first use
// (cuda_library.hpp), once, and forwards to it. A function distrun starts to call is added here,
// with its declaration's exact signature (the compiler checks it against the header's).
#pragma GCC visibility push(hidden)
#include <cuda_runtime_api.h>
#include <nccl.h>
#pragma GCC visibility pop

#include "distrun/nccl/cuda_library.hpp"

namespace {

using distrun::nccl::cuda_symbol;
using distrun::nccl::CudaLibrary;

}  // namespace

// The symbol name after macro expansion: the headers may map a name to a versioned entry point.
#define DISTRUN_SYMBOL_NAME(name) DISTRUN_SYMBOL_NAME_(name)
#define DISTRUN_SYMBOL_NAME_(name) #name
#define DISTRUN_FORWARD(lib, ret, name, params, args)                                                                 \
  ret name params {                                                                                                   \
    static const auto fn = reinterpret_cast<ret(*) params>(cuda_symbol(CudaLibrary::lib, DISTRUN_SYMBOL_NAME(name))); \
    return fn args;                                                                                                   \
  }

extern "C" {

DISTRUN_FORWARD(Runtime, cudaError_t, cudaGetDeviceCount, (int* count), (count))
DISTRUN_FORWARD(Runtime, cudaError_t, cudaDriverGetVersion, (int* v), (v))
DISTRUN_FORWARD(Runtime, cudaError_t, cudaRuntimeGetVersion, (int* v), (v))
DISTRUN_FORWARD(Runtime, cudaError_t, cudaGetLastError, (void), ())
DISTRUN_FORWARD(Runtime, const char*, cudaGetErrorString, (cudaError_t e), (e))
DISTRUN_FORWARD(Runtime, cudaError_t, cudaSetDevice, (int device), (device))
DISTRUN_FORWARD(Runtime, cudaError_t, cudaDeviceGetAttribute, (int* value, enum cudaDeviceAttr attr, int device),
                (value, attr, device))
DISTRUN_FORWARD(Runtime, cudaError_t, cudaDeviceGetPCIBusId, (char* id, int len, int device), (id, len, device))
DISTRUN_FORWARD(Runtime, cudaError_t, cudaDeviceGetDefaultMemPool, (cudaMemPool_t * pool, int device), (pool, device))
DISTRUN_FORWARD(Runtime, cudaError_t, cudaMemPoolSetAttribute,
                (cudaMemPool_t pool, enum cudaMemPoolAttr attr, void* value), (pool, attr, value))
DISTRUN_FORWARD(Runtime, cudaError_t, cudaStreamCreateWithFlags, (cudaStream_t * s, unsigned int flags), (s, flags))
DISTRUN_FORWARD(Runtime, cudaError_t, cudaStreamDestroy, (cudaStream_t s), (s))
DISTRUN_FORWARD(Runtime, cudaError_t, cudaStreamWaitEvent, (cudaStream_t s, cudaEvent_t e, unsigned int flags),
                (s, e, flags))
DISTRUN_FORWARD(Runtime, cudaError_t, cudaEventCreateWithFlags, (cudaEvent_t * e, unsigned int flags), (e, flags))
DISTRUN_FORWARD(Runtime, cudaError_t, cudaEventRecord, (cudaEvent_t e, cudaStream_t s), (e, s))
DISTRUN_FORWARD(Runtime, cudaError_t, cudaEventQuery, (cudaEvent_t e), (e))
DISTRUN_FORWARD(Runtime, cudaError_t, cudaEventSynchronize, (cudaEvent_t e), (e))
DISTRUN_FORWARD(Runtime, cudaError_t, cudaEventDestroy, (cudaEvent_t e), (e))
DISTRUN_FORWARD(Runtime, cudaError_t, cudaEventElapsedTime, (float* ms, cudaEvent_t start, cudaEvent_t end),
                (ms, start, end))
DISTRUN_FORWARD(Runtime, cudaError_t, cudaMalloc, (void** p, size_t size), (p, size))
DISTRUN_FORWARD(Runtime, cudaError_t, cudaFree, (void* p), (p))
DISTRUN_FORWARD(Runtime, cudaError_t, cudaMallocAsync, (void** p, size_t size, cudaStream_t s), (p, size, s))
DISTRUN_FORWARD(Runtime, cudaError_t, cudaFreeAsync, (void* p, cudaStream_t s), (p, s))
DISTRUN_FORWARD(Runtime, cudaError_t, cudaHostAlloc, (void** p, size_t size, unsigned int flags), (p, size, flags))
DISTRUN_FORWARD(Runtime, cudaError_t, cudaFreeHost, (void* p), (p))
DISTRUN_FORWARD(Runtime, cudaError_t, cudaMemset, (void* p, int value, size_t count), (p, value, count))
DISTRUN_FORWARD(Runtime, cudaError_t, cudaMemcpyAsync,
                (void* dst, const void* src, size_t count, enum cudaMemcpyKind kind, cudaStream_t s),
                (dst, src, count, kind, s))
DISTRUN_FORWARD(Runtime, cudaError_t, cudaMemcpy2D,
                (void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                 enum cudaMemcpyKind kind),
                (dst, dpitch, src, spitch, width, height, kind))
DISTRUN_FORWARD(Runtime, cudaError_t, cudaMemcpy2DAsync,
                (void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                 enum cudaMemcpyKind kind, cudaStream_t s),
                (dst, dpitch, src, spitch, width, height, kind, s))

DISTRUN_FORWARD(Nccl, ncclResult_t, ncclGetVersion, (int* version), (version))
DISTRUN_FORWARD(Nccl, ncclResult_t, ncclGetUniqueId, (ncclUniqueId * id), (id))
DISTRUN_FORWARD(Nccl, const char*, ncclGetErrorString, (ncclResult_t r), (r))
DISTRUN_FORWARD(Nccl, const char*, ncclGetLastError, (ncclComm_t comm), (comm))
DISTRUN_FORWARD(Nccl, ncclResult_t, ncclCommInitRankConfig,
                (ncclComm_t * comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config),
                (comm, nranks, id, rank, config))
DISTRUN_FORWARD(Nccl, ncclResult_t, ncclCommSplit,
                (ncclComm_t comm, int color, int key, ncclComm_t* child, ncclConfig_t* config),
                (comm, color, key, child, config))
DISTRUN_FORWARD(Nccl, ncclResult_t, ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t* state), (comm, state))
DISTRUN_FORWARD(Nccl, ncclResult_t, ncclCommFinalize, (ncclComm_t comm), (comm))
DISTRUN_FORWARD(Nccl, ncclResult_t, ncclCommDestroy, (ncclComm_t comm), (comm))
DISTRUN_FORWARD(Nccl, ncclResult_t, ncclCommAbort, (ncclComm_t comm), (comm))
DISTRUN_FORWARD(Nccl, ncclResult_t, ncclGroupStart, (), ())
DISTRUN_FORWARD(Nccl, ncclResult_t, ncclGroupEnd, (), ())
DISTRUN_FORWARD(Nccl, ncclResult_t, ncclAllReduce,
                (const void* in, void* out, size_t count, ncclDataType_t dt, ncclRedOp_t op, ncclComm_t comm,
                 cudaStream_t s),
                (in, out, count, dt, op, comm, s))
DISTRUN_FORWARD(Nccl, ncclResult_t, ncclBroadcast,
                (const void* in, void* out, size_t count, ncclDataType_t dt, int root, ncclComm_t comm, cudaStream_t s),
                (in, out, count, dt, root, comm, s))
DISTRUN_FORWARD(Nccl, ncclResult_t, ncclReduce,
                (const void* in, void* out, size_t count, ncclDataType_t dt, ncclRedOp_t op, int root, ncclComm_t comm,
                 cudaStream_t s),
                (in, out, count, dt, op, root, comm, s))
DISTRUN_FORWARD(Nccl, ncclResult_t, ncclAllGather,
                (const void* in, void* out, size_t count, ncclDataType_t dt, ncclComm_t comm, cudaStream_t s),
                (in, out, count, dt, comm, s))
DISTRUN_FORWARD(Nccl, ncclResult_t, ncclReduceScatter,
                (const void* in, void* out, size_t count, ncclDataType_t dt, ncclRedOp_t op, ncclComm_t comm,
                 cudaStream_t s),
                (in, out, count, dt, op, comm, s))
DISTRUN_FORWARD(Nccl, ncclResult_t, ncclSend,
                (const void* in, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm, cudaStream_t s),
                (in, count, dt, peer, comm, s))
DISTRUN_FORWARD(Nccl, ncclResult_t, ncclRecv,
                (void* out, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm, cudaStream_t s),
                (out, count, dt, peer, comm, s))
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
DISTRUN_FORWARD(Nccl, ncclResult_t, ncclGather,
                (const void* in, void* out, size_t count, ncclDataType_t dt, int root, ncclComm_t comm, cudaStream_t s),
                (in, out, count, dt, root, comm, s))
DISTRUN_FORWARD(Nccl, ncclResult_t, ncclScatter,
                (const void* in, void* out, size_t count, ncclDataType_t dt, int root, ncclComm_t comm, cudaStream_t s),
                (in, out, count, dt, root, comm, s))
DISTRUN_FORWARD(Nccl, ncclResult_t, ncclAlltoAll,
                (const void* in, void* out, size_t count, ncclDataType_t dt, ncclComm_t comm, cudaStream_t s),
                (in, out, count, dt, comm, s))
#endif

}  // extern "C"
