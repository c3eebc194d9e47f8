#include "distrun/gloo/ring.hpp"

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include <algorithm>
#include <functional>
#include <vector>
#include <string>

#include "distrun/core/error.hpp"

namespace distrun {

namespace {

using Buffer = gloo::transport::UnboundBuffer;

int mod(int i, int n) { return ((i % n) + n) % n; }

void require(bool ok, const RingPlan& p) {
  if (!ok) throw TimeoutError("timed out after " + std::to_string(p.timeout.count()) + " ms");
}

// One ring step: receive recv_len bytes from the left neighbour into `recv` at recv_at while
// sending send_len bytes from `send` at send_at to the right one, both in segments; calls
// on_segment(offset, length) for each received segment as it arrives.
void step(const RingPlan& p, Buffer& recv, size_t recv_at, size_t recv_len, Buffer& send, size_t send_at,
          size_t send_len, const std::function<void(size_t, size_t)>& on_segment) {
  const int left = mod(p.rank - 1, p.size), right = mod(p.rank + 1, p.size);
  const size_t seg = std::max(p.element_size, p.segment_bytes / p.element_size * p.element_size);
  for (size_t off = 0; off < recv_len; off += seg) recv.recv(left, p.slot, recv_at + off, std::min(seg, recv_len - off));
  int sends = 0;
  for (size_t off = 0; off < send_len; off += seg, ++sends) send.send(right, p.slot, send_at + off, std::min(seg, send_len - off));
  for (size_t off = 0; off < recv_len; off += seg) {
    require(recv.waitRecv(nullptr, p.timeout), p);
    if (on_segment) on_segment(off, std::min(seg, recv_len - off));
  }
  for (int k = 0; k < sends; ++k) require(send.waitSend(nullptr, p.timeout), p);
}

}  // namespace

void ring_all_reduce(const RingPlan& p, void* data, size_t count) {
  const int n = p.size;
  if (n == 1 || count == 0) return;
  const size_t es = p.element_size;
  const size_t chunk = (count + size_t(n) - 1) / size_t(n);
  auto at = [&](int b) { return std::min(size_t(mod(b, n)) * chunk, count) * es; };
  auto len = [&](int b) { return std::min(size_t(mod(b, n)) * chunk + chunk, count) * es - at(b); };
  auto* base = static_cast<char*>(data);
  std::vector<char> scratch(chunk * es);
  auto buf = p.context->createUnboundBuffer(base, count * es);
  auto tmp = p.context->createUnboundBuffer(scratch.data(), scratch.size());
  // Reduce-scatter in place: at step s, block r-s-1 (holding s+1 ranks' sum) goes right and
  // block r-s-2 comes in from the left and is summed into ours.
  for (int s = 0; s < n - 1; ++s) {
    const int in_block = p.rank - s - 2;
    step(p, *tmp, 0, len(in_block), *buf, at(p.rank - s - 1), len(p.rank - s - 1), [&](size_t off, size_t l) {
      char* mine = base + at(in_block) + off;
      p.reduce(mine, scratch.data() + off, mine, l / es);
    });
  }
  // All-gather: block r is complete here; pass complete blocks around the ring.
  for (int s = 0; s < n - 1; ++s)
    step(p, *buf, at(p.rank - s - 1), len(p.rank - s - 1), *buf, at(p.rank - s), len(p.rank - s), nullptr);
}

void ring_reduce_scatter(const RingPlan& p, const void* input, void* output, size_t block, void* scratch) {
  const int n = p.size;
  auto* in = static_cast<char*>(const_cast<void*>(input));
  auto* partial = static_cast<char*>(scratch);
  auto at = [&](int b) { return size_t(mod(b, n)) * block; };
  auto inbuf = p.context->createUnboundBuffer(in, block * size_t(n));
  auto tmp = p.context->createUnboundBuffer(partial, 2 * block);
  // Partial sums alternate between the two halves of scratch; the first send comes straight
  // from the input and the last sum goes straight into the output.
  for (int s = 0; s < n - 1; ++s) {
    const size_t recv_at = size_t(s % 2) * block;
    Buffer& send = s == 0 ? *inbuf : *tmp;
    const size_t send_at = s == 0 ? at(p.rank - 1) : size_t((s + 1) % 2) * block;
    char* target = s == n - 2 ? static_cast<char*>(output) : partial + recv_at;
    const char* mine = in + at(p.rank - s - 2);
    step(p, *tmp, recv_at, block, send, send_at, block, [&](size_t off, size_t l) {
      p.reduce(target + off, partial + recv_at + off, mine + off, l / p.element_size);
    });
  }
}

}  // namespace distrun
