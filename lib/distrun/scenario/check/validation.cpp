#include "distrun/scenario/check/validation.hpp"

#include <algorithm>

#include "distrun/scenario/model/limits.hpp"
#include "distrun/scenario/model/op_table.hpp"

namespace distrun::scenario {

std::string ranks_str(int world) { return std::to_string(world) + (world == 1 ? " rank" : " ranks"); }

WorldView::WorldView(const Scenario& sc, int world_size, int local_world_size)
    : sc_(sc), world_size_(world_size), local_world_size_(std::max(1, local_world_size)) {}

RankEnv WorldView::env(int rank) const {
  return {rank, world_size_, rank % local_world_size_, std::min(local_world_size_, world_size_)};
}

void WorldView::fail(Mark m, const std::string& msg) const { throw error_at(sc_.file, m, msg); }

std::string WorldView::where(const Step& s) const {
  return "step " + std::to_string(s.index) + " (" + sc_.spec(s.op).name + ")";
}

std::vector<int> WorldView::participants(const Step& s) const {
  if (s.group) return sc_.find_group(s.group.view())->members;
  std::vector<int> all(static_cast<size_t>(world_size_));
  for (int r = 0; r < world_size_; ++r) all[size_t(r)] = r;
  return all;
}

std::vector<int> WorldView::result_ranks(const Step& s) const {
  const auto members = participants(s);
  switch (sc_.spec(s.op).result_at) {
    case ResultAt::None: return {};
    case ResultAt::Dst:
      return std::find(members.begin(), members.end(), s.args().dst) != members.end() ? std::vector<int>{s.args().dst}
                                                                                      : std::vector<int>{};
    case ResultAt::Members: break;
  }
  if (!s.args().more().ranks) return members;
  std::vector<int> chosen;  // a map's `ranks`: those that are members, in member order
  for (int r : members)
    if (std::find(s.args().more().ranks->begin(), s.args().more().ranks->end(), r) != s.args().more().ranks->end())
      chosen.push_back(r);
  return chosen;
}

Validation::Validation(const Scenario& sc, int world_size, int local_world_size, std::optional<int> own_rank, bool nccl)
    : WorldView(sc, world_size, local_world_size), own_(own_rank), nccl_(nccl) {
  if (sc.world_size && *sc.world_size != world_size)
    fail(sc.world_size_mark, "the scenario declares world_size " + std::to_string(*sc.world_size) +
                                 " but the launched world has " + ranks_str(world_size));
  for (const auto& g : sc.groups)
    for (int m : g.members)
      if (m >= world_size)
        fail(g.mark, "group '" + g.name + "': member " + std::to_string(m) + " is out of range for a world of " +
                         ranks_str(world_size));
  // Sizes first, from the shapes alone: a tensor no host could hold is refused before any
  // value is computed.
  state_.assign(size_t(world_size), RankTensors{});
  for (int r = 0; r < world_size; ++r) {
    int64_t total = 0;
    for (const auto& [name, spec] : sc.tensors) {
      TensorMeta m{spec_shape(spec, sc.dtype, env(r), sc.file), spec.dtype.value_or(sc.dtype)};
      const auto bytes = checked_bytes(m.shape, m.dtype);
      if (__builtin_add_overflow(total, *bytes, &total)) total = INT64_MAX;
      check_fits(total, spec.mark, "the tensors of rank " + std::to_string(r) + " up to '" + name + "'");
      define(r, *sc.names->find(name), m);  // the loader names every tensor
    }
  }
  for (int r = 0; r < world_size; ++r)
    for (const auto& [name, spec] : sc.tensors) check_fill_values(spec, r);
  for (const auto& s : sc.steps) sc.spec(s.op).validate(*this, s);
}

void Validation::check_fill_values(const TensorSpec& spec, int rank, Origin origin) {
  if (spec.has_values || !spec.fill.expr) return;  // literals: checked by the loader
  const Expression& e = *spec.fill.expr;
  const bool by_index = e.uses("i") || e.uses("j") || e.uses("k") || e.uses("idx");
  const bool by_rank = e.uses("rank") || e.uses("local_rank");
  if (!by_index) {  // one value per rank (check_fill evaluates it once)
    check_fill(spec, sc_.dtype, env(rank), sc_.file, origin);
    return;
  }
  if (!by_rank) {  // the same values on every rank of one shape
    if (fills_checked_.emplace(&spec, spec_shape(spec, sc_.dtype, env(rank), sc_.file, origin)).second)
      check_fill(spec, sc_.dtype, env(rank), sc_.file, origin);
    return;
  }
  const bool always = (own_ && rank == *own_) || rank == 0 || rank == world_size_ - 1;
  if (!always) {
    const int64_t n = numel_of(spec_shape(spec, sc_.dtype, env(rank), sc_.file, origin));
    if (n > fill_budget_) return;  // that rank's worker checks its own before it joins
    fill_budget_ -= n;
  }
  check_fill(spec, sc_.dtype, env(rank), sc_.file, origin);
}

void Validation::check_fits(int64_t bytes_per_rank, Mark m, const std::string& what) const {
  const int64_t ranks_here = std::min(local_world_size_, world_size_);
  const int64_t memory = host_memory_bytes();
  int64_t on_host = 0;
  if (!__builtin_mul_overflow(bytes_per_rank, ranks_here, &on_host) && on_host <= memory) return;
  fail(m, what + " need" + (what.rfind("the ", 0) == 0 ? "" : "s") + " " + human_bytes(double(bytes_per_rank)) +
              " per rank; " + std::to_string(ranks_here) + (ranks_here == 1 ? " rank" : " ranks") +
              " on this host need " + human_bytes(double(bytes_per_rank) * double(ranks_here)) + ", more than its " +
              human_bytes(double(memory)) + " of memory");
}

int Validation::member_index(const Step& s, const std::vector<int>& members, int global, Mark m,
                             const char* what) const {
  if (global >= world_size_)
    fail(m, where(s) + ": " + what + " " + std::to_string(global) + " is out of range for a world of " +
                ranks_str(world_size_));
  for (size_t i = 0; i < members.size(); ++i)
    if (members[i] == global) return int(i);
  fail(m, where(s) + ": " + what + " " + std::to_string(global) + " is not a member of group '" + s.group.str() + "'");
}

TensorMeta Validation::input(const Step& s, int rank) {
  if (s.args().input.spec) {
    const TensorSpec& spec = *s.args().input.spec;
    TensorMeta m{spec_shape(spec, sc_.dtype, env(rank), sc_.file, s.origin()), spec.dtype.value_or(sc_.dtype)};
    check_fits(*checked_bytes(m.shape, m.dtype), s.at(spec.mark), where(s) + ": the input");
    check_fill_values(spec, rank, s.origin());
    return on_backend(s, m);
  }
  if (const TensorMeta* t = tensor(rank, s.input)) return on_backend(s, *t);
  fail(s.at(s.args().input.mark), where(s) + ": tensor '" + s.input.str() + "' is not defined on rank " +
                                      std::to_string(rank) + did_you_mean(s.input.str(), names(rank)));
}

const TensorMeta& Validation::on_backend(const Step& s, const TensorMeta& m) const {
  // A step whose results are made of other ranks' tensors hands them to the backend.
  const Reads reads = sc_.spec(s.op).reads;
  if (nccl_ && (reads == Reads::Src || reads == Reads::EveryMember))
    if (auto why = nccl_dtype_refusal(m.dtype)) fail(s.at(s.args().input.mark), where(s) + ": " + *why);
  return m;
}

std::vector<TensorMeta> Validation::inputs(const Step& s, const std::vector<int>& members) {
  std::vector<TensorMeta> in;
  in.reserve(members.size());
  for (int r : members) in.push_back(input(s, r));
  return in;
}

void Validation::require_same_shapes(const Step& s, const std::vector<TensorMeta>& in, const std::vector<int>& members,
                                     int except_dim) const {
  for (size_t i = 1; i < in.size(); ++i) {
    Shape a = as_vector_shape(in[0].shape), b = as_vector_shape(in[i].shape);
    if (except_dim >= 0 && a.size() == b.size() && size_t(except_dim) < a.size())
      a[size_t(except_dim)] = b[size_t(except_dim)];
    if (a != b || in[0].dtype != in[i].dtype)
      fail(s.at(s.args().input.mark), where(s) + ": rank " + std::to_string(members[i]) + " has " +
                                          dtype_name(in[i].dtype) + " " + shape_str(in[i].shape) + " but rank " +
                                          std::to_string(members[0]) + " has " + dtype_name(in[0].dtype) + " " +
                                          shape_str(in[0].shape));
  }
}

uint32_t Validation::RankTensors::get(uint32_t id) const {
  if (!by_id.empty()) return id < by_id.size() ? by_id[id] : 0;
  const auto it = few.find(id);
  return it == few.end() ? 0 : it->second;
}

void Validation::RankTensors::set(uint32_t id, uint32_t meta, size_t names) {
  if (by_id.empty() && few.size() >= std::max<size_t>(names / 16, 64)) {
    by_id.assign(std::max<size_t>(names, id + 1), 0);
    for (const auto& [k, v] : few) by_id[k] = v;
    std::unordered_map<uint32_t, uint32_t>().swap(few);  // its memory goes now, not at the end
  }
  if (by_id.empty()) {
    few[id] = meta;
    return;
  }
  if (id >= by_id.size()) by_id.resize(size_t(id) + 1, 0);
  by_id[id] = meta;
}

const TensorMeta* Validation::tensor(int rank, Name name) const {
  const uint32_t m = name ? state_[size_t(rank)].get(name.id()) : 0;
  return m ? &metas_[m - 1] : nullptr;
}

const TensorMeta* Validation::tensor(int rank, std::string_view name) const {
  const auto n = sc_.names->find(name);
  return n ? tensor(rank, *n) : nullptr;
}

void Validation::define(int rank, Name name, const TensorMeta& t) {
  if (!name) return;  // a step without a result names none
  const auto [it, added] = meta_ids_.try_emplace({t.shape, t.dtype}, uint32_t(metas_.size()));
  if (added) metas_.push_back(t);
  state_[size_t(rank)].set(name.id(), it->second + 1, sc_.names->size());
}

std::vector<std::string> Validation::names(int rank) const {
  std::vector<std::string> out;
  const auto& st = state_[size_t(rank)];
  for (size_t id = 0; id < st.by_id.size(); ++id)
    if (st.by_id[id]) out.push_back(sc_.names->name(uint32_t(id)).str());
  for (const auto& [id, meta] : st.few)
    if (meta) out.push_back(sc_.names->name(id).str());
  std::sort(out.begin(), out.end());
  return out;
}

void Validation::check_reduce(const Step& s, DType dtype) const {
  if (auto why = reduce_op_refusal(s.args().reduce, dtype)) fail(s.at(s.args().reduce_mark), where(s) + ": " + *why);
  if (auto why = nccl_ ? nccl_reduce_refusal(s.args().reduce) : std::nullopt)
    fail(s.at(s.args().reduce_mark), where(s) + ": " + *why);
}

int Validation::check_dim(const Step& s, const Shape& shape) const {
  const int ndim = std::max(1, int(shape.size()));
  if (s.args().dim >= ndim)
    fail(s.at(s.args().dim_mark), where(s) + ": dim " + std::to_string(s.args().dim) + " is out of range for shape " +
                                      shape_str(as_vector_shape(shape)));
  return s.args().dim;
}

void Validation::require_even_split(const Step& s, const Shape& shape, int dim, int n, const Shape& shown) const {
  if (shape[size_t(dim)] % n != 0)
    fail(s.at(s.args().input.mark), where(s) + ": size " + std::to_string(shape[size_t(dim)]) + " of dim " +
                                        std::to_string(dim) + " of " + shape_str(shown) + " does not split into " +
                                        std::to_string(n) + " equal chunks");
}

void Validation::set_result(const Step& s, int rank, const TensorMeta& t) { define(rank, s.output, t); }

}  // namespace distrun::scenario
