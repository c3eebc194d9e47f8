#include "distrun/comm/collectives.hpp"

#include <cstring>

#include "distrun/core/error.hpp"

namespace distrun {

namespace {

template <typename Opts>
Opts with(const CollectiveOptions& o) {
  Opts out;
  out.timeout = o.timeout;
  return out;
}

void check_dim(const Tensor& t, int dim, const char* op) {
  if (dim < 0 || dim >= std::max(1, t.dim()))
    throw BackendError(std::string(op) + ": dim " + std::to_string(dim) + " out of range for shape " +
                       shape_str(t.shape()));
}

// A scalar takes part as a one-element vector.
Tensor as_vector_if_scalar(const Tensor& t) { return t.dim() == 0 ? t.reshape({1}) : t; }

// The flat rank-block buffer (as backends exchange) -> blocks concatenated along dim.
Tensor unpack_blocks(const Tensor& flat, const Shape& block_shape, int n, int dim) {
  Shape out = block_shape;
  out[size_t(dim)] *= n;
  if (dim == 0) return flat.reshape(out);
  Tensor result = Tensor::empty(out, flat.dtype(), flat.device());
  const int64_t per = numel_of(block_shape);
  for (int r = 0; r < n; ++r)
    result.assign_slice(dim, r * block_shape[size_t(dim)], flat.slice(0, r * per, per).reshape(block_shape));
  return result;
}

// Chunks of `t` along dim with the given sizes, packed one after another in a flat buffer.
Tensor pack_chunks(const Tensor& t, int dim, const std::vector<int64_t>& sizes) {
  if (dim == 0) return t.reshape({t.numel()});
  Tensor flat = Tensor::empty({t.numel()}, t.dtype(), t.device());
  int64_t at_dim = 0, at_flat = 0;
  for (int64_t s : sizes) {
    Tensor c = t.slice(dim, at_dim, s);
    flat.assign_slice(0, at_flat, c.reshape({c.numel()}));
    at_dim += s;
    at_flat += c.numel();
  }
  return flat;
}

std::vector<int64_t> even_sizes(const Tensor& t, int dim, int n, const char* op) {
  if (t.shape()[size_t(dim)] % n != 0)
    throw BackendError(std::string(op) + ": size " + std::to_string(t.shape()[size_t(dim)]) + " of dim " +
                       std::to_string(dim) + " does not split into " + std::to_string(n) + " equal chunks");
  return std::vector<int64_t>(size_t(n), t.shape()[size_t(dim)] / n);
}

std::string to_bytes(const nlohmann::ordered_json& obj) { return obj.dump(); }

nlohmann::ordered_json from_bytes(const char* p, size_t n) { return nlohmann::ordered_json::parse(p, p + n); }

// A CPU tensor moved to where the backend's tensors live (a no-op for Gloo).
Tensor on_backend(const Backend& b, const Tensor& t) {
  return b.tensor_device() == t.device() ? t : t.to(b.tensor_device());
}
Tensor on_host(const Tensor& t) { return t.device().is_cuda() ? t.to(Device::cpu()) : t; }

// Every rank's byte string, in rank order: lengths first, then one all_gather padded to the
// longest (torch does the same for all_gather_object).
std::vector<std::string> all_gather_bytes(Backend& b, const std::string& mine, const CollectiveOptions& o,
                                          int root = -1) {
  const int n = b.size();
  Tensor len = Tensor::empty({1}, DType::Int64);
  len.data_as<int64_t>()[0] = int64_t(mine.size());
  Tensor lens = Tensor::empty({n}, DType::Int64, b.tensor_device());
  b.all_gather(on_backend(b, len), lens, with<AllgatherOptions>(o));
  lens = on_host(lens);
  int64_t longest = 0;
  for (int r = 0; r < n; ++r) longest = std::max(longest, lens.data_as<int64_t>()[r]);
  Tensor buf = Tensor::zeros({longest}, DType::UInt8);
  std::memcpy(buf.data(), mine.data(), mine.size());
  buf = on_backend(b, buf);
  Tensor all = Tensor::empty({longest * n}, DType::UInt8, b.tensor_device());
  if (root < 0) {
    b.all_gather(buf, all, with<AllgatherOptions>(o));
  } else {
    auto go = with<GatherOptions>(o);
    go.root = root;
    b.gather(buf, all, go);
    if (b.rank() != root) return {};
  }
  all = on_host(all);
  std::vector<std::string> out;
  for (int r = 0; r < n; ++r) out.emplace_back(all.data_as<char>() + r * longest, size_t(lens.data_as<int64_t>()[r]));
  return out;
}

}  // namespace

Tensor all_gather(Backend& b, const Tensor& in0, int dim, const CollectiveOptions& o) {
  Tensor in = as_vector_if_scalar(in0);
  check_dim(in, dim, "all_gather");
  Tensor flat = Tensor::empty({in.numel() * b.size()}, in.dtype(), in.device());
  b.all_gather(in, flat, with<AllgatherOptions>(o));
  return unpack_blocks(flat, in.shape(), b.size(), dim);
}

Tensor gather(Backend& b, const Tensor& in0, int root, int dim, const CollectiveOptions& o) {
  Tensor in = as_vector_if_scalar(in0);
  check_dim(in, dim, "gather");
  const bool is_root = b.rank() == root;
  Tensor flat = is_root ? Tensor::empty({in.numel() * b.size()}, in.dtype(), in.device()) : Tensor();
  auto go = with<GatherOptions>(o);
  go.root = root;
  b.gather(in, flat, go);
  return is_root ? unpack_blocks(flat, in.shape(), b.size(), dim) : Tensor();
}

Tensor scatter(Backend& b, const Tensor& in0, int root, int dim, const CollectiveOptions& o) {
  Tensor in = as_vector_if_scalar(in0);
  check_dim(in, dim, "scatter");
  auto sizes = even_sizes(in, dim, b.size(), "scatter");
  Shape out_shape = in.shape();
  out_shape[size_t(dim)] = sizes[0];
  Tensor out = Tensor::empty(out_shape, in.dtype(), in.device());
  auto so = with<ScatterOptions>(o);
  so.root = root;
  Tensor flat = b.rank() == root ? pack_chunks(in, dim, sizes) : Tensor();
  b.scatter(flat, out, so);
  return out;
}

Tensor reduce_scatter(Backend& b, const Tensor& in0, int dim, ReduceOp op, const CollectiveOptions& o) {
  Tensor in = as_vector_if_scalar(in0);
  check_dim(in, dim, "reduce_scatter");
  auto sizes = even_sizes(in, dim, b.size(), "reduce_scatter");
  Shape out_shape = in.shape();
  out_shape[size_t(dim)] = sizes[0];
  Tensor out = Tensor::empty(out_shape, in.dtype(), in.device());
  auto ro = with<ReduceScatterOptions>(o);
  ro.op = op;
  b.reduce_scatter(pack_chunks(in, dim, sizes), out, ro);
  return out;
}

Tensor all_to_all(Backend& b, const Tensor& in0, int dim, const std::vector<int64_t>& split_sizes,
                  const CollectiveOptions& o) {
  Tensor in = as_vector_if_scalar(in0);
  check_dim(in, dim, "all_to_all");
  const int n = b.size();
  const int64_t extent = in.shape()[size_t(dim)];
  // Elements per unit along dim, from the other dims: a rank that sends nothing (extent 0)
  // still receives rows of this size.
  Shape unit = in.shape();
  unit[size_t(dim)] = 1;
  const int64_t row = numel_of(unit);
  if (split_sizes.empty()) {
    auto sizes = even_sizes(in, dim, n, "all_to_all");
    Tensor out = Tensor::empty({in.numel()}, in.dtype(), in.device());
    b.all_to_all(pack_chunks(in, dim, sizes), out, with<AllToAllOptions>(o));
    Shape block = in.shape();
    block[size_t(dim)] = sizes[0];
    return unpack_blocks(out, block, n, dim);
  }
  if (int(split_sizes.size()) != n)
    throw BackendError("all_to_all: split_sizes has " + std::to_string(split_sizes.size()) + " entries for " +
                       std::to_string(n) + " ranks");
  int64_t total = 0;
  for (int64_t s : split_sizes) total += s;
  if (total != extent)
    throw BackendError("all_to_all: split_sizes add up to " + std::to_string(total) + ", dim " + std::to_string(dim) +
                       " has " + std::to_string(extent));
  // Every rank learns what it receives: the sizes each peer sends it, exchanged on the
  // backend's own device (NCCL moves device memory only).
  Tensor mine = Tensor::empty({n}, DType::Int64);
  std::memcpy(mine.data(), split_sizes.data(), sizeof(int64_t) * size_t(n));
  const Device dev = b.tensor_device();
  Tensor theirs = Tensor::empty({n}, DType::Int64, dev);
  b.all_to_all(mine.to(dev), theirs, with<AllToAllOptions>(o));
  theirs = theirs.to(Device::cpu());
  std::vector<int64_t> recv_sizes(theirs.data_as<int64_t>(), theirs.data_as<int64_t>() + n);
  auto ao = with<AllToAllOptions>(o);
  int64_t recv_total = 0;
  for (int j = 0; j < n; ++j) {
    ao.send_counts.push_back(split_sizes[size_t(j)] * row);
    ao.recv_counts.push_back(recv_sizes[size_t(j)] * row);
    recv_total += recv_sizes[size_t(j)];
  }
  Tensor flat = Tensor::empty({recv_total * row}, in.dtype(), in.device());
  b.all_to_all(pack_chunks(in, dim, split_sizes), flat, ao);
  Shape out_shape = in.shape();
  out_shape[size_t(dim)] = recv_total;
  if (dim == 0) return flat.reshape(out_shape);
  Tensor out = Tensor::empty(out_shape, in.dtype(), in.device());
  int64_t at_dim = 0, at_flat = 0;
  for (int j = 0; j < n; ++j) {
    Shape block = in.shape();
    block[size_t(dim)] = recv_sizes[size_t(j)];
    out.assign_slice(dim, at_dim, flat.slice(0, at_flat, numel_of(block)).reshape(block));
    at_dim += recv_sizes[size_t(j)];
    at_flat += numel_of(block);
  }
  return out;
}

std::vector<nlohmann::ordered_json> all_gather_object(Backend& b, const nlohmann::ordered_json& obj,
                                                      const CollectiveOptions& o) {
  std::vector<nlohmann::ordered_json> out;
  for (const auto& s : all_gather_bytes(b, to_bytes(obj), o)) out.push_back(from_bytes(s.data(), s.size()));
  return out;
}

std::vector<nlohmann::ordered_json> gather_object(Backend& b, const nlohmann::ordered_json& obj, int root,
                                                  const CollectiveOptions& o) {
  std::vector<nlohmann::ordered_json> out;
  for (const auto& s : all_gather_bytes(b, to_bytes(obj), o, root)) out.push_back(from_bytes(s.data(), s.size()));
  return out;
}

nlohmann::ordered_json broadcast_object(Backend& b, const nlohmann::ordered_json& obj, int root,
                                        const CollectiveOptions& o) {
  std::string mine = b.rank() == root ? to_bytes(obj) : std::string();
  Tensor len = Tensor::empty({1}, DType::Int64);
  len.data_as<int64_t>()[0] = int64_t(mine.size());
  len = on_backend(b, len);
  auto bo = with<BroadcastOptions>(o);
  bo.root = root;
  b.broadcast(len, bo);
  len = on_host(len);
  Tensor buf = Tensor::zeros({len.data_as<int64_t>()[0]}, DType::UInt8);
  if (b.rank() == root) std::memcpy(buf.data(), mine.data(), mine.size());
  buf = on_backend(b, buf);
  b.broadcast(buf, bo);
  buf = on_host(buf);
  return from_bytes(buf.data_as<char>(), size_t(buf.numel()));
}

}  // namespace distrun
