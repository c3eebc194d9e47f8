// An NCCL group call (ncclGroupStart ... ncclGroupEnd) closed on every path. NCCL counts group
// depth per thread: a throw between the two calls would leave it raised, so every later call of
// this thread, ncclCommAbort included, would only be queued and never run. The guard closes the
// group in its destructor when end() was not reached.
#pragma once
#include <nccl.h>

#include "distrun/nccl/nccl_check.hpp"

namespace distrun::nccl {

class NcclGroup {
 public:
  NcclGroup() { DISTRUN_NCCL_CHECK(ncclGroupStart()); }
  /// Unwinding: closes the group; its result is moot (the error being thrown is the news), and a
  /// nonblocking communicator's queued work is aborted by the caller's error path.
  ~NcclGroup() {
    if (open_) ncclGroupEnd();
  }
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

  /// ncclGroupEnd, once; its result (ncclInProgress for a nonblocking communicator) for the caller.
  ncclResult_t end() {
    open_ = false;
    return ncclGroupEnd();
  }

 private:
  bool open_ = true;
};

}  // namespace distrun::nccl
