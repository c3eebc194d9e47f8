#include "distrun/backend/intent.hpp"

#include <algorithm>
#include <functional>

namespace distrun {

namespace {

std::string kind_text(uint64_t k) {
  return is_collective_kind(k) ? collective_name(CollectiveKind(k)) : "collective #" + std::to_string(k);
}

}  // namespace

void Intent::encode(uint64_t* out, int n) const {
  out[0] = uint64_t(kind);
  out[1] = seq;
  out[2] = dtype;
  out[3] = op;
  out[4] = uint64_t(int64_t(root));
  out[5] = bytes;
  out[6] = address;
  out[7] = extent;
  out[8] = flags;
  out[9] = whole;
  if (kind != CollectiveKind::AllToAll) return;
  for (size_t j = 0; j < size_t(n); ++j) {
    out[kHeaderWords + j] = j < send_offset.size() ? send_offset[j] : 0;
    out[kHeaderWords + size_t(n) + j] = j < send_bytes.size() ? send_bytes[j] : 0;
    out[kHeaderWords + 2 * size_t(n) + j] = j < recv_bytes.size() ? recv_bytes[j] : 0;
  }
}

Intent Intent::decode(const uint64_t* in, int n) {
  Intent i;
  decode(in, n, i);
  return i;
}

void Intent::decode(const uint64_t* in, int n, Intent& i) {
  i.kind = CollectiveKind(uint32_t(in[0]));
  i.seq = in[1];
  i.dtype = uint32_t(in[2]);
  i.op = uint32_t(in[3]);
  i.root = int32_t(int64_t(in[4]));
  i.bytes = in[5];
  i.address = in[6];
  i.extent = in[7];
  i.flags = in[8];
  i.whole = in[9];
  if (in[0] == uint64_t(CollectiveKind::AllToAll)) {
    i.send_offset.assign(in + kHeaderWords, in + kHeaderWords + n);
    i.send_bytes.assign(in + kHeaderWords + n, in + kHeaderWords + 2 * size_t(n));
    i.recv_bytes.assign(in + kHeaderWords + 2 * size_t(n), in + kHeaderWords + 3 * size_t(n));
  } else {
    i.send_offset.clear();
    i.send_bytes.clear();
    i.recv_bytes.clear();
  }
}

uint64_t readable_bytes(const Intent& in, int r, int n) {
  if (!is_collective_kind(uint64_t(in.kind))) return in.bytes;
  const CollectiveForm& f = form_of(in.kind);
  const bool root = r == in.root;
  switch (f.buffers) {
    case Buffers::Exchanges: {
      uint64_t end = 0;
      for (size_t j = 0; j < in.send_offset.size() && j < in.send_bytes.size(); ++j)
        end = std::max(end, in.send_offset[j] + in.send_bytes[j]);
      return end;
    }
    case Buffers::Scatters: return f.rooted && !root ? 0 : in.bytes * uint64_t(n);
    case Buffers::Gathers:
    case Buffers::InPlace:
      // Into a root: the root only reads (gather, reduce); from a root: only it is read (broadcast).
      if (f.rooted) return (f.buffers == Buffers::Gathers || f.reduces) == root ? 0 : in.bytes;
      return in.bytes;
    case Buffers::None: return 0;
  }
  return in.bytes;
}

namespace {

// Which buffer of rank r must hold n blocks (nullptr: none, or not stated): the output of the
// kinds that gather, the input of those that scatter, where the rank has it. A step of a
// composite collective (kAgreed) was checked as a whole already.
const char* whole_buffer(const Intent& in, int r) {
  if (in.whole == Intent::kUnstated || (in.flags & Intent::kAgreed) || !is_collective_kind(uint64_t(in.kind)))
    return nullptr;
  const CollectiveForm& f = form_of(in.kind);
  if (f.rooted && r != in.root) return nullptr;
  return f.buffers == Buffers::Gathers ? "output" : f.buffers == Buffers::Scatters ? "input" : nullptr;
}

// The common case, checked without building a word of the messages below: every field that
// must agree does, every buffer covers its reads. Only when this says no does
// check_agreement find out which and phrase it.
bool all_agree(const std::vector<Intent>& all, bool extents) {
  const int n = int(all.size());
  const Intent& first = all.front();
  if (first.root != -1 && (first.root < 0 || first.root >= n)) return false;
  for (const Intent& i : all)
    if (i.kind != first.kind || i.seq != first.seq || i.dtype != first.dtype || i.op != first.op ||
        i.root != first.root || (first.kind != CollectiveKind::AllToAll && i.bytes != first.bytes))
      return false;
  if (first.kind == CollectiveKind::AllToAll)
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) {
        const auto& sent = all[size_t(i)].send_bytes;
        const auto& expected = all[size_t(j)].recv_bytes;
        if (size_t(j) >= sent.size() || size_t(i) >= expected.size() || sent[size_t(j)] != expected[size_t(i)])
          return false;
      }
  for (int r = 0; r < n; ++r)
    if (whole_buffer(all[size_t(r)], r) && all[size_t(r)].whole != first.bytes * uint64_t(n)) return false;
  if (extents)
    for (int r = 0; r < n; ++r)
      if (all[size_t(r)].extent < readable_bytes(all[size_t(r)], r, n)) return false;
  return true;
}

}  // namespace

void check_agreement(const std::vector<Intent>& all, bool extents, const std::vector<int>& global_ranks) {
  if (all_agree(all, extents)) return;
  const int n = int(all.size());
  auto g = [&](int r) { return global_rank_of(global_ranks, r); };
  const Intent& first = all.front();
  const std::string what = kind_text(uint64_t(first.kind)) + " #" + std::to_string(first.seq);
  // The ranks whose `field` differs from rank 0's, with both values: every rank builds the
  // same text from the same table.
  auto differ = [&](const char* subject, const std::function<std::string(const Intent&)>& field) {
    const std::string base = field(first);
    std::string msg;
    int listed = 0;
    for (int r = 1; r < n; ++r) {
      const std::string v = field(all[size_t(r)]);
      if (v == base) continue;
      if (listed++ < 8) msg += ", rank " + std::to_string(g(r)) + " has " + v;
    }
    if (listed == 0) return;
    if (listed > 8) msg += " (and " + std::to_string(listed - 8) + " more)";
    throw CollectiveMismatchError(what + ": the ranks disagree on " + subject + ": rank " + std::to_string(g(0)) +
                                  " has " + base + msg);
  };
  differ("which collective runs",
         [](const Intent& i) { return kind_text(uint64_t(i.kind)) + " #" + std::to_string(i.seq); });
  differ("the dtype", [](const Intent& i) {
    return i.dtype <= uint32_t(DType::Int64) ? std::string(dtype_name(DType(i.dtype)))
                                             : "dtype #" + std::to_string(i.dtype);
  });
  differ("the reduction", [](const Intent& i) {
    return i.op == 0xff ? std::string("none") : std::string(reduce_op_name(ReduceOp(i.op)));
  });
  differ("the root", [](const Intent& i) { return std::to_string(i.root); });
  if (first.root != -1 && (first.root < 0 || first.root >= n))
    throw CollectiveMismatchError(what + ": root " + std::to_string(first.root) + " is not a rank of this group of " +
                                  std::to_string(n));
  if (first.kind == CollectiveKind::AllToAll) {
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) {
        const uint64_t sent = all[size_t(i)].send_bytes.at(size_t(j)),
                       expected = all[size_t(j)].recv_bytes.at(size_t(i));
        if (sent != expected)
          throw CollectiveMismatchError(what + ": rank " + std::to_string(g(i)) + " sends " + std::to_string(sent) +
                                        " bytes to rank " + std::to_string(g(j)) + ", which expects " +
                                        std::to_string(expected));
      }
  } else {
    differ("the bytes per rank", [](const Intent& i) { return std::to_string(i.bytes) + " bytes"; });
    for (int r = 0; r < n; ++r)
      if (const char* buffer = whole_buffer(all[size_t(r)], r);
          buffer && all[size_t(r)].whole != first.bytes * uint64_t(n))
        throw CollectiveMismatchError(what + ": rank " + std::to_string(g(r)) + "'s " + buffer + " holds " +
                                      std::to_string(all[size_t(r)].whole) + " bytes, not " + std::to_string(n) +
                                      " blocks of " + std::to_string(first.bytes));
  }
  if (!extents) return;
  for (int r = 0; r < n; ++r) {
    const uint64_t need = readable_bytes(all[size_t(r)], r, n);
    if (all[size_t(r)].extent < need)
      throw CollectiveMismatchError(what + ": rank " + std::to_string(g(r)) + "'s buffer holds " +
                                    std::to_string(all[size_t(r)].extent) + " bytes, but its peers would read " +
                                    std::to_string(need));
  }
}

}  // namespace distrun
