#include "distrun/gloo/cma.hpp"

#include <gloo/allgather.h>
#include <gloo/barrier.h>
#include <gloo/context.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "distrun/core/error.hpp"

namespace distrun {

namespace {

std::string boot_id() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(f, id);
  return id;
}

// Reads `bytes` at `address` in process `pid` into `dst`; errno-style result (0 = done).
int read_remote(pid_t pid, uint64_t address, void* dst, size_t bytes) {
  auto* d = static_cast<char*>(dst);
  while (bytes > 0) {
    iovec local{d, bytes}, remote{reinterpret_cast<void*>(address), bytes};
    ssize_t got = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (got == 0) return EFAULT;
    d += got;
    address += uint64_t(got);
    bytes -= size_t(got);
  }
  return 0;
}

}  // namespace

std::unique_ptr<CmaTransport> CmaTransport::create(std::shared_ptr<gloo::Context> context, Store& store, int rank,
                                                   int size, std::function<uint32_t()> next_tag) {
  const char* off = std::getenv("DISTRUN_CMA");
  if (size < 2 || (off && std::string(off) == "0")) return nullptr;
  // Every member publishes its host (boot id), pid and the address of a token it holds.
  static const uint64_t token = 0x6469737472756e21ull;  // "distrun!"
  std::ostringstream me;
  me << boot_id() << " " << getpid() << " " << reinterpret_cast<uint64_t>(&token);
  store.set("cma/" + std::to_string(rank), me.str());
  std::vector<pid_t> pids(static_cast<size_t>(size));
  bool ok = true;
  for (int r = 0; r < size; ++r) {
    std::istringstream in(store.get("cma/" + std::to_string(r)));
    std::string boot;
    uint64_t pid = 0, address = 0;
    in >> boot >> pid >> address;
    pids[size_t(r)] = pid_t(pid);
    uint64_t seen = 0;
    ok = ok && boot == boot_id() && read_remote(pid_t(pid), address, &seen, sizeof seen) == 0 && seen == token;
  }
  // Only when every member can read every other: all or none take the CMA path.
  store.set("cma/ok/" + std::to_string(rank), ok ? "1" : "0");
  for (int r = 0; r < size; ++r) ok = store.get("cma/ok/" + std::to_string(r)) == "1" && ok;
  if (!ok) return nullptr;
  return std::unique_ptr<CmaTransport>(new CmaTransport(std::move(context), rank, size, std::move(pids), std::move(next_tag)));
}

CmaTransport::CmaTransport(std::shared_ptr<gloo::Context> context, int rank, int size, std::vector<pid_t> pids,
                           std::function<uint32_t()> next_tag)
    : context_(std::move(context)), rank_(rank), size_(size), pids_(std::move(pids)), next_tag_(std::move(next_tag)) {}

std::vector<std::vector<uint64_t>> CmaTransport::exchange(const void* base, const std::vector<uint64_t>& offsets,
                                                          std::chrono::milliseconds timeout) {
  const size_t words = 1 + size_t(size_);
  std::vector<uint64_t> mine(words, 0), all(words * size_t(size_));
  mine[0] = reinterpret_cast<uint64_t>(base);
  std::copy(offsets.begin(), offsets.end(), mine.begin() + 1);
  gloo::AllgatherOptions o(context_);
  o.setInput(mine.data(), words);
  o.setOutput(all.data(), all.size());
  o.setTag(next_tag_());
  o.setTimeout(timeout);
  gloo::allgather(o);
  std::vector<std::vector<uint64_t>> table(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) table[size_t(r)].assign(all.begin() + long(words * size_t(r)), all.begin() + long(words * size_t(r + 1)));
  return table;
}

void CmaTransport::read(int peer, uint64_t address, void* dst, size_t bytes) {
  if (bytes == 0) return;
  if (int err = read_remote(pids_[size_t(peer)], address, dst, bytes))
    throw BackendError("reading rank " + std::to_string(peer) + "'s buffer (process " + std::to_string(pids_[size_t(peer)]) +
                       ") failed: " + std::strerror(err));
}

void CmaTransport::barrier(std::chrono::milliseconds timeout) {
  gloo::BarrierOptions o(context_);
  o.setTag(next_tag_());
  o.setTimeout(timeout);
  gloo::barrier(o);
}

void CmaTransport::all_gather(const void* in, void* out, size_t bytes, std::chrono::milliseconds timeout) {
  auto table = exchange(in, {}, timeout);
  auto* o = static_cast<char*>(out);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_)
      std::memcpy(o + size_t(r) * bytes, in, bytes);
    else
      read(r, table[size_t(r)][0], o + size_t(r) * bytes, bytes);
  }
  barrier(timeout);
}

void CmaTransport::gather(const void* in, void* out, size_t bytes, int root, std::chrono::milliseconds timeout) {
  auto table = exchange(in, {}, timeout);
  if (rank_ == root) {
    auto* o = static_cast<char*>(out);
    for (int r = 0; r < size_; ++r) {
      if (r == rank_)
        std::memcpy(o + size_t(r) * bytes, in, bytes);
      else
        read(r, table[size_t(r)][0], o + size_t(r) * bytes, bytes);
    }
  }
  barrier(timeout);
}

void CmaTransport::scatter(const void* in, void* out, size_t bytes, int root, std::chrono::milliseconds timeout) {
  auto table = exchange(in, {}, timeout);
  if (rank_ == root)
    std::memcpy(out, static_cast<const char*>(in) + size_t(rank_) * bytes, bytes);
  else
    read(root, table[size_t(root)][0] + uint64_t(rank_) * bytes, out, bytes);
  barrier(timeout);
}

void CmaTransport::broadcast(void* data, size_t bytes, int root, std::chrono::milliseconds timeout) {
  auto table = exchange(data, {}, timeout);
  if (rank_ != root) read(root, table[size_t(root)][0], data, bytes);
  barrier(timeout);
}

void CmaTransport::reduce_scatter(const void* in, void* out, size_t bytes, size_t element_size, ReduceFn fn,
                                  std::chrono::milliseconds timeout) {
  auto table = exchange(in, {}, timeout);
  const size_t at = size_t(rank_) * bytes;
  std::memcpy(out, static_cast<const char*>(in) + at, bytes);
  if (scratch_.size() < bytes) scratch_.resize(bytes);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    read(r, table[size_t(r)][0] + at, scratch_.data(), bytes);
    fn(out, out, scratch_.data(), bytes / element_size);
  }
  barrier(timeout);
}

void CmaTransport::all_reduce(void* data, size_t count, size_t element_size, ReduceFn fn,
                              std::chrono::milliseconds timeout) {
  // Block b = elements [b*chunk, ...). Phase 1: every rank reduces its own block in place from
  // the peers' copies of it (no peer writes that block of its own buffer in this phase).
  // Phase 2, after a barrier: every rank reads each peer's finished block.
  auto table = exchange(data, {}, timeout);
  auto* base = static_cast<char*>(data);
  const size_t chunk = (count + size_t(size_) - 1) / size_t(size_);
  auto at = [&](int b) { return std::min(size_t(b) * chunk, count) * element_size; };
  auto len = [&](int b) { return std::min(size_t(b) * chunk + chunk, count) * element_size - at(b); };
  if (scratch_.size() < len(rank_)) scratch_.resize(len(rank_));
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || len(rank_) == 0) continue;
    read(r, table[size_t(r)][0] + at(rank_), scratch_.data(), len(rank_));
    fn(base + at(rank_), base + at(rank_), scratch_.data(), len(rank_) / element_size);
  }
  barrier(timeout);
  for (int r = 0; r < size_; ++r)
    if (r != rank_) read(r, table[size_t(r)][0] + at(r), base + at(r), len(r));
  barrier(timeout);
}

void CmaTransport::reduce(void* data, size_t count, size_t element_size, ReduceFn fn, int root,
                          std::chrono::milliseconds timeout) {
  auto table = exchange(data, {}, timeout);
  if (rank_ == root) {
    const size_t bytes = count * element_size;
    if (scratch_.size() < bytes) scratch_.resize(bytes);
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      read(r, table[size_t(r)][0], scratch_.data(), bytes);
      fn(data, data, scratch_.data(), count);
    }
  }
  barrier(timeout);
}

void CmaTransport::all_to_all(const void* in, void* out, const std::vector<size_t>& send_offset,
                              const std::vector<size_t>& recv_bytes, std::chrono::milliseconds timeout) {
  std::vector<uint64_t> offsets(send_offset.begin(), send_offset.end());
  auto table = exchange(in, offsets, timeout);
  auto* o = static_cast<char*>(out);
  size_t at = 0;
  for (int r = 0; r < size_; ++r) {
    const uint64_t src = table[size_t(r)][0] + table[size_t(r)][1 + size_t(rank_)];
    if (r == rank_)
      std::memcpy(o + at, static_cast<const char*>(in) + send_offset[size_t(r)], recv_bytes[size_t(r)]);
    else
      read(r, src, o + at, recv_bytes[size_t(r)]);
    at += recv_bytes[size_t(r)];
  }
  barrier(timeout);
}

}  // namespace distrun
