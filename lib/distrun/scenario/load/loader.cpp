#include "distrun/scenario/load/loader.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <unordered_map>

#include "distrun/bench/collectives.hpp"
#include "distrun/scenario/load/yaml_guard.hpp"
#include "distrun/scenario/model/limits.hpp"
#include "distrun/scenario/model/op_table.hpp"

namespace distrun::scenario {

namespace {

const std::vector<std::string> kTopKeys = {"name",  "description", "world_size", "backend", "device",
                                           "dtype", "timeout",     "groups",     "tensors", "steps"};
const std::vector<std::string> kSpecKeys = {"shape", "fill", "values", "dtype"};
const std::vector<std::string> kCommonStepKeys = {"op", "group", "print", "check"};
// Names an expression may use outside map: the rank's place in the job (+ indices in fills).
const std::vector<std::string> kRankVars = {"rank", "world_size", "local_rank", "local_world_size"};
const std::vector<std::string> kFillVars = {"rank", "world_size", "local_rank", "local_world_size",
                                            "i",    "j",          "k",          "idx"};

class Loader {
 public:
  Loader(std::string file, const OpTable& ops) : file_(std::move(file)), ops_(ops) {}

  [[noreturn]] void fail(const YamlNode& n, const std::string& msg) const { throw error_at(file_, n.mark(), msg); }
  [[noreturn]] void fail(Mark m, const std::string& msg) const { throw error_at(file_, m, msg); }

  void check_keys(const YamlNode& map, const std::vector<std::string>& allowed, const std::string& where) const {
    for (const auto& kv : map.entries()) {
      const std::string key(kv.key.scalar());
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end())
        fail(kv.key, "unknown key '" + excerpt(key) + "' in " + where + did_you_mean(key, allowed));
    }
  }

  std::string str(const YamlNode& n, const std::string& what) const {
    if (!n.is_scalar()) fail(n, what + " must be a string");
    return std::string(n.scalar());
  }

  std::string shown(const YamlNode& n) const {
    return n.is_scalar() ? excerpt(n.scalar()) : std::string("a ") + kind(n);
  }

  int64_t integer(const YamlNode& n, const std::string& what) const {
    const CoreScalar c = resolve_scalar(n);
    if (c.kind == CoreScalar::Int && c.fits_int64) return c.integer;
    if (c.kind == CoreScalar::Int) fail(n, what + ": " + excerpt(n.scalar()) + " is out of the range of int64");
    fail(n, what + " must be an integer, got '" + shown(n) + "'");
  }

  // An integer field held as an int (ranks, dims, counts), checked in that type: a value of
  // 2^32 + 1 must not wrap to 1.
  int int_field(const YamlNode& n, const std::string& what, int64_t lo, const std::string& lo_words) const {
    const int64_t v = integer(n, what);
    if (v < lo) fail(n, what + " must be " + lo_words + ", got " + std::to_string(v));
    if (v > INT32_MAX) fail(n, what + " must be at most " + std::to_string(INT32_MAX) + ", got " + std::to_string(v));
    return int(v);
  }

  Literal literal(const YamlNode& n, const std::string& what) const {
    const CoreScalar c = resolve_scalar(n);
    Literal out;
    out.real = c.real;
    if (c.kind == CoreScalar::Int && c.fits_int64)
      out.integer = c.integer;
    else if (c.kind == CoreScalar::Int && !c.fits_uint64)
      fail(n, what + ": " + excerpt(n.scalar()) + " is beyond every dtype's range");
    else if (c.kind != CoreScalar::Float && c.kind != CoreScalar::Int)
      fail(n, what + " must be a number, got '" + shown(n) + "'");
    return out;
  }

  // An entry of a bool tensor may also be written true or false (as torch.tensor([True])).
  Literal element(const YamlNode& n, const std::string& what, DType dtype) const {
    if (dtype == DType::Bool && n.is_scalar()) {
      const CoreScalar c = resolve_scalar(n);
      if (c.kind == CoreScalar::Bool) return {c.boolean ? 1.0 : 0.0, c.boolean ? 1 : 0};
    }
    return literal(n, what);
  }

  double real(const YamlNode& n, const std::string& what) const { return literal(n, what).real; }

  std::optional<std::string> unrepresentable_literal(const Literal& l, DType dtype) const {
    return l.integer ? unrepresentable(*l.integer, dtype) : unrepresentable(l.real, dtype);
  }

  bool boolean(const YamlNode& n, const std::string& what) const {
    const CoreScalar c = resolve_scalar(n);
    if (c.kind == CoreScalar::Bool) return c.boolean;
    fail(n, what + " must be true or false");
  }

  static const char* kind(const YamlNode& n) {
    if (n.is_map()) return "mapping";
    if (n.is_sequence()) return "list";
    if (n.is_null()) return "null";
    return "scalar";
  }

  // `offset`: where `text` starts inside the scalar (for ${...} inside a longer string).
  std::shared_ptr<Expression> compile(const YamlNode& n, const std::string& text,
                                      const std::vector<std::string>* allowed, size_t offset = 0) const {
    std::shared_ptr<Expression> e;
    try {
      e = std::make_shared<Expression>(text);
    } catch (const ExpressionError& err) {
      Mark m = n.mark();
      m.col += int(offset + err.position) + (n.is_quoted() ? 1 : 0);
      fail(m, "bad expression '" + excerpt(text) + "': " + err.message);
    }
    if (allowed)
      for (const auto& v : e->variables())
        if (std::find(allowed->begin(), allowed->end(), v) == allowed->end())
          fail(n, "unknown name '" + excerpt(v) + "' in expression '" + excerpt(text) + "'" +
                      did_you_mean(v, *allowed) + "; names allowed here: " + join(*allowed));
    return e;
  }

  static std::string join(const std::vector<std::string>& v) {
    std::string out;
    for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
    return out;
  }

  // A literal number, or an expression string over `allowed`.
  Number number(const YamlNode& n, const std::string& what, const std::vector<std::string>& allowed) const {
    Number out;
    out.mark = here(n);
    if (!n.is_scalar()) fail(n, what + " must be a number or an expression string");
    const CoreScalar c = resolve_scalar(n);
    if (c.kind == CoreScalar::Int || c.kind == CoreScalar::Float) {
      const Literal l = literal(n, what);
      out.value = l.real;
      out.integer = l.integer;
      return out;
    }
    out.expr = compile(n, std::string(n.scalar()), &allowed);
    return out;
  }

  DType dtype(const YamlNode& n) const {
    auto d = parse_dtype(str(n, "dtype"));
    if (!d) {
      const std::vector<std::string> names = dtype_names();
      fail(n,
           "unknown dtype '" + excerpt(n.scalar()) + "'" + did_you_mean(n.scalar(), names) + "; known: " + join(names));
    }
    return *d;
  }

  ReduceOp reduce(const YamlNode& n, bool local) const {
    auto r = parse_reduce_op(str(n, "reduce"));
    std::vector<std::string> names = {"sum", "avg", "prod", "min", "max"};
    if (!local) names.insert(names.end(), {"band", "bor", "bxor"});
    if (!r || (local && int(*r) > int(ReduceOp::Max)))
      fail(n, "unknown reduce op '" + excerpt(n.scalar()) + "'" + did_you_mean(n.scalar(), names) +
                  "; known: " + join(names));
    return *r;
  }

  void flatten_values(const YamlNode& n, size_t depth, TensorSpec& spec) const {
    if (n.is_sequence()) {
      if (depth == spec.values_shape.size())
        spec.values_shape.push_back(int64_t(n.size()));
      else if (depth > spec.values_shape.size() || spec.values_shape[depth] != int64_t(n.size()))
        fail(n, "values is not rectangular: expected " +
                    (depth < spec.values_shape.size() ? std::to_string(spec.values_shape[depth])
                                                      : std::string("a number")) +
                    " entries here");
      for (const auto& c : n) flatten_values(c, depth + 1, spec);
      return;
    }
    if (depth != spec.values_shape.size()) fail(n, "values is not rectangular: a list was expected here");
    const DType dtype = spec.dtype.value_or(default_dtype_);
    const Literal v = element(n, "each entry of values", dtype);
    if (auto why = unrepresentable_literal(v, dtype)) fail(n, *why);
    spec.values.push_back(v);
  }

  TensorSpec tensor_spec(const YamlNode& n) const {
    if (!n.is_map()) fail(n, "a tensor spec must be a mapping with shape/fill, or values");
    check_keys(n, kSpecKeys, "tensor spec");
    TensorSpec spec;
    spec.mark = here(n);
    if (n["dtype"]) spec.dtype = dtype(n["dtype"]);
    if (const auto s = n["shape"]) {
      if (!s.is_sequence()) fail(s, "shape must be a list");
      spec.has_shape = true;
      for (const auto& e : s) spec.shape.push_back(number(e, "a shape entry", kRankVars));
    }
    if (const auto v = n["values"]) {
      if (n["fill"]) fail(n["fill"], "a tensor spec takes fill or values, not both");
      spec.has_values = true;
      // Room for the entries a rectangular list holds (its first entry at each depth times
      // its length): a million values are not copied as the list grows.
      const auto most = size_t(YamlLimits{}.max_nodes);
      size_t expected = 1;
      for (YamlNode e = v; e.is_sequence() && e.size() > 0 && expected <= most; e = e.item(0)) expected *= e.size();
      spec.values.reserve(std::min(expected, most));
      flatten_values(v, 0, spec);
    } else if (!spec.has_shape) {
      fail(n, "a tensor spec needs a shape (or values)");
    }
    if (const auto f = n["fill"]) {
      const DType dtype = spec.dtype.value_or(default_dtype_);
      if (dtype == DType::Bool && f.is_scalar() && resolve_scalar(f).kind == CoreScalar::Bool) {
        const Literal b = element(f, "fill", dtype);
        spec.fill.value = b.real, spec.fill.integer = b.integer, spec.fill.mark = here(f);
      } else {
        spec.fill = number(f, "fill", kFillVars);
      }
      if (!spec.fill.expr)
        if (auto why =
                unrepresentable_literal({spec.fill.value, spec.fill.integer}, spec.dtype.value_or(default_dtype_)))
          fail(f, *why);
    }
    return spec;
  }

  TensorRef tensor_ref(const YamlNode& n) const {
    TensorRef ref;
    ref.mark = here(n);
    if (!n.is_scalar()) ref.spec = std::make_shared<TensorSpec>(tensor_spec(n));  // else a name (step_names)
    return ref;
  }

  // YAML -> JSON, compiling each "${expr}" found in strings. `left` is what the object may
  // still take (a byte per node, plus each key's and string's length, aliases expanded): an
  // object is copied once per rank by every object collective and again by each rank's
  // reference, so a small alias bomb within the YAML limits must not become gigabytes.
  nlohmann::ordered_json to_json(const YamlNode& n, ObjectTemplate& t, size_t& left) const {
    auto take = [&](size_t bytes) {
      if (bytes >= left)
        fail(n, "object: more than " + std::to_string(kMaxObjectBytes) +
                    " bytes once its aliases are expanded (the objects of object collectives are small)");
      left -= bytes;
    };
    take(1);
    if (n.is_map()) {
      nlohmann::ordered_json o = nlohmann::ordered_json::object();
      for (const auto& kv : n.entries()) {
        const std::string key(kv.key.scalar());
        take(key.size());
        o[key] = to_json(kv.value, t, left);
      }
      return o;
    }
    if (n.is_sequence()) {
      nlohmann::ordered_json a = nlohmann::ordered_json::array();
      for (const auto& c : n) a.push_back(to_json(c, t, left));
      return a;
    }
    const CoreScalar c = resolve_scalar(n);
    switch (c.kind) {
      case CoreScalar::Null: return nullptr;
      case CoreScalar::Bool: return c.boolean;
      case CoreScalar::Int:
        if (c.fits_int64) return c.integer;
        if (c.fits_uint64) return c.uinteger;
        fail(n, "object: the integer " + excerpt(n.scalar()) + " is beyond int64 and uint64");
      case CoreScalar::Float: return c.real;
      case CoreScalar::String: break;
    }
    const std::string s(n.scalar());
    take(s.size());
    for (size_t at = s.find("${"); at != std::string::npos; at = s.find("${", at + 2)) {
      const size_t end = s.find('}', at);
      if (end == std::string::npos) fail(n, "unterminated ${...} in '" + excerpt(s) + "'");
      const std::string text = s.substr(at + 2, end - at - 2);
      t.exprs.emplace_back(text, compile(n, text, &kRankVars, at + 2));
    }
    return s;
  }

  int rank_field(const YamlNode& step, const char* key, Mark& mark) const {
    const auto n = step[key];
    mark = here(n ? n : step);
    if (!n) return 0;
    return int_field(n, key, 0, "a rank (0 or more)");
  }

  BenchSpec bench(const YamlNode& n) const {
    BenchSpec b;
    if (const auto c = n["collective"]) {
      auto op = ops_.parse(str(c, "collective"));
      // What distrun-bench measures (bench/collectives.hpp), under the same names as the ops.
      static const std::vector<std::string> tensor_ops = [] {
        std::vector<std::string> names;
        for (const auto& b : bench::collectives()) names.emplace_back(b.name);
        return names;
      }();
      if (!op || std::find(tensor_ops.begin(), tensor_ops.end(), c.scalar()) == tensor_ops.end())
        fail(c, "bench: unknown collective '" + excerpt(c.scalar()) + "'" + did_you_mean(c.scalar(), tensor_ops) +
                    "; known: " + join(tensor_ops));
      b.collective = *op;
    } else {
      fail(n, "bench needs a collective");
    }
    const auto bytes = n["bytes"];
    if (!bytes) fail(n, "bench needs bytes (a list of sizes, or {min, max, factor})");
    auto size = [&](const YamlNode& s) {
      auto v = s.is_scalar() ? parse_byte_size(std::string(s.scalar())) : std::nullopt;
      if (!v || *v <= 0) fail(s, "bad size '" + shown(s) + "': use bytes or K/M/G (powers of 1024)");
      return *v;
    };
    if (bytes.is_sequence()) {
      if (bytes.size() > kMaxBenchSizes)
        fail(bytes, "bench: " + std::to_string(bytes.size()) + " sizes; at most " + std::to_string(kMaxBenchSizes));
      for (const auto& s : bytes) b.bytes.push_back(size(s));
    } else if (bytes.is_map()) {
      check_keys(bytes, {"min", "max", "factor"}, "bytes");
      if (!bytes["min"] || !bytes["max"]) fail(bytes, "bytes needs min and max");
      const int64_t lo = size(bytes["min"]), hi = size(bytes["max"]);
      const double factor = bytes["factor"] ? real(bytes["factor"], "factor") : 2.0;
      if (factor <= 1.0) fail(bytes["factor"], "factor must be more than 1");
      if (hi < lo) fail(bytes["max"], "max is smaller than min");
      // A factor a hair above 1 would make a list without end: count it before making it.
      const double count = std::floor(std::log(double(hi) / double(lo)) / std::log(factor) + 1e-9) + 1;
      if (!(count <= double(kMaxBenchSizes)))
        fail(bytes["factor"] ? bytes["factor"] : bytes,
             "bench: min, max and factor make " +
                 (std::isfinite(count) && count < 1e15 ? std::to_string(int64_t(count)) : std::string("endless")) +
                 " sizes; at most " + std::to_string(kMaxBenchSizes));
      b.bytes = byte_size_range(lo, hi, factor);
    } else {
      b.bytes.push_back(size(bytes));
    }
    if (n["dtype"]) b.dtype = dtype(n["dtype"]);
    if (n["reduce"]) b.reduce = reduce(n["reduce"], false);
    if (n["iters"]) b.iters = int_field(n["iters"], "iters", 1, "at least 1");
    if (n["warmup"]) b.warmup = int_field(n["warmup"], "warmup", 0, "0 or more");
    if (n["root"]) b.root = int_field(n["root"], "root", 0, "a rank (0 or more)");
    return b;
  }

  // Steps written alike (the same keys and texts at the same places, lines counted from the
  // step's own, whatever names they use) are made alike, whatever else the file says: they
  // share one StepArgs, so a file of 200 000 `{op: all_reduce, input: x, output: yN}` holds
  // one, and are read once. Each keeps its own names.
  Step shared_step(const YamlNode& n, int index) const {
    line_base_ = n.mark().line;
    std::string key;
    const bool keyed = alike_key(n, key, true);
    if (keyed)
      if (const auto it = alike_.find(key); it != alike_.end()) {
        Step s = it->second;
        s.index = index;
        s.mark = n.mark();
        step_names(n, s);
        return s;
      }
    Step s = step(n, index);
    step_names(n, s);
    if (keyed) {
      if (alike_.size() >= kAlikeSteps) alike_.clear();  // bounded: steps alike tend to be near
      alike_.emplace(std::move(key), s);
    }
    return s;
  }

  static bool is_name_key(std::string_view key) { return key == "input" || key == "output" || key == "group"; }

  // Appends what `n` is made of to `key`: its kind, place and text, then its entries; of a
  // step (`step`), the texts of its names are left out. False past kMaxAlikeKey bytes (a step
  // with a long list of its own is not shared).
  bool alike_key(const YamlNode& n, std::string& key, bool step = false, bool text = true) const {
    const Mark m = here(n);
    const std::string_view scalar = n.scalar();
    const int size = n.is_scalar() ? int(scalar.size()) : int(n.size());
    key += n.is_map() ? 'm' : n.is_sequence() ? 's' : n.is_null() ? 'n' : n.is_quoted() ? 'q' : 'p';
    for (const int v : {m.line, m.col, text ? size : 0}) key.append(reinterpret_cast<const char*>(&v), sizeof v);
    if (text) key += scalar;
    if (key.size() > kMaxAlikeKey) return false;
    if (n.is_map()) {
      for (size_t i = 0; i < n.size(); ++i) {
        const bool name = step && n.value(i).is_scalar() && is_name_key(n.key(i).scalar());
        if (!alike_key(n.key(i), key) || !alike_key(n.value(i), key, false, !name)) return false;
      }
    } else if (n.is_sequence()) {
      for (const auto& c : n)
        if (!alike_key(c, key)) return false;
    }
    return true;
  }

  // The names `n` uses, on `s` as read by step(): its input's, its result's and its group's.
  void step_names(const YamlNode& n, Step& s) const {
    const OpSpec& spec = ops_.spec(s.op);
    s.input = s.output = s.group = Name();
    if (const auto g = n["group"]) s.group = names_->intern(g.scalar());
    if (const auto in = n["input"]; s.args().has_input && in.is_scalar()) s.input = names_->intern(in.scalar());
    if (std::find(spec.keys.begin(), spec.keys.end(), "output") == spec.keys.end()) return;
    if (const auto o = n["output"])
      s.output = names_->intern(o.scalar());
    else if (!s.input.empty())
      s.output = s.input;
    else
      s.output = names_->intern(spec.name);  // an inline input without output: the result is named after the op
  }

  // A mark to keep in the model: within a step, its line counted from the step's (model.hpp).
  Mark here(const YamlNode& n) const {
    Mark m = n.mark();
    m.line -= line_base_;
    return m;
  }

  Step step(const YamlNode& n, int index) const {
    if (!n.is_map()) fail(n, "a step must be a mapping with an op");
    Step s;
    s.index = index;
    s.mark = n.mark();
    const auto opn = n["op"];
    if (!opn) fail(n, "step " + std::to_string(index) + " has no op");
    auto op = ops_.parse(str(opn, "op"));
    if (!op) fail(opn, "unknown op '" + excerpt(opn.scalar()) + "'" + did_you_mean(opn.scalar(), ops_.names()));
    s.op = *op;
    StepArgs a;
    StepMore m;
    // Which keys the step may and must give is the op's (op_table); what each key means is
    // the same for every op, so the rest reads them by name.
    const OpSpec& spec = ops_.spec(s.op);
    auto allowed = kCommonStepKeys;
    for (auto& k : spec.keys) allowed.push_back(k);
    check_keys(n, allowed, std::string(spec.name) + " step");
    for (const auto& k : spec.required)
      if (!n[k])
        fail(n, std::string(spec.name) + " needs " +
                    (k == "input" || k == "object" || k == "expr" || k == "output" ? "an " : "") + k);

    if (const auto g = n["group"]) {
      str(g, "group");
      a.group_mark = here(g);
    }
    if (n["print"]) s.print = boolean(n["print"], "print");
    if (n["check"]) s.check = boolean(n["check"], "check");

    const auto has = [&](const char* k) { return std::find(allowed.begin(), allowed.end(), k) != allowed.end(); };
    if (has("input")) {
      a.input = tensor_ref(n["input"]);
      a.has_input = true;
    }
    if (has("output")) {  // the name: step_names
      if (const auto o = n["output"]) {
        str(o, "output");
        a.output_mark = here(o);
      } else {
        a.output_mark = a.input.mark;
      }
    }
    if (const auto d = n["dim"]) {
      const int v = int_field(d, "dim", 0, "0 or more");
      if (spec.whole_tensor_dim)
        a.local_dim = int(v);
      else
        a.dim = int(v);
      a.dim_mark = here(d);
    }
    if (n["keepdim"]) a.keepdim = boolean(n["keepdim"], "keepdim");
    if (has("reduce") && !has("collective")) {  // bench reads its own reduce
      if (const auto r = n["reduce"]) {
        a.reduce = reduce(r, spec.local_reduce_ops);
        a.has_reduce = true;
        a.reduce_mark = here(r);
      } else {
        a.reduce_mark = here(n);
      }
    }
    if (has("src")) a.src = rank_field(n, "src", a.src_mark);
    if (has("dst")) a.dst = rank_field(n, "dst", a.dst_mark);
    if (has("src") && has("dst") && a.src == a.dst)
      fail(n["dst"], std::string(spec.name) + ": src and dst are the same rank");
    if (n["async"]) a.async = boolean(n["async"], "async");
    if (const auto ss = n["split_sizes"]) {
      if (!ss.is_sequence()) fail(ss, "split_sizes must be a list (one size per rank)");
      m.has_split_sizes = true;
      m.split_mark = here(ss);
      for (const auto& e : ss) m.split_sizes.push_back(number(e, "a split size", kRankVars));
    }
    if (const auto e = n["expr"]) {
      if (!e.is_scalar()) fail(e, "expr must be an expression string");
      m.expr = compile(e, std::string(e.scalar()), nullptr);  // tensor names are checked by the simulation
      m.expr_mark = here(e);
      if (n["dtype"]) m.dtype = dtype(n["dtype"]);
      if (const auto r = n["ranks"]) {
        m.ranks_mark = here(r);
        std::vector<int> ranks;
        if (r.is_sequence())
          for (const auto& x : r) ranks.push_back(int_field(x, "each entry of ranks", 0, "a rank (0 or more)"));
        else
          ranks.push_back(int_field(r, "ranks", 0, "a rank (0 or more)"));
        m.ranks = ranks;
      }
    }
    if (const auto o = n["object"]) {
      m.object.mark = here(o);
      size_t left = kMaxObjectBytes;
      m.object.value = to_json(o, m.object, left);
    }
    if (has("collective")) m.bench = bench(n);
    if (n["split_sizes"] || n["expr"] || n["object"] || has("collective"))
      a.rare = std::make_unique<const StepMore>(std::move(m));
    if (!spec.keys.empty() || n["group"]) s.given = &step_args_->emplace_back(std::move(a));
    return s;
  }

  Scenario scenario(const YamlNode& root) const {
    if (!root.is_map()) fail(root, "a scenario must be a mapping with steps");
    check_keys(root, kTopKeys, "the scenario");
    Scenario sc;
    names_ = sc.names;
    step_args_ = sc.step_args;
    sc.file = file_;
    sc.ops = &ops_;
    sc.name = root["name"] ? str(root["name"], "name") : std::filesystem::path(file_).stem().string();
    if (const auto w = root["world_size"]) {
      sc.world_size = int_field(w, "world_size", 1, "at least 1");
      sc.world_size_mark = w.mark();
    }
    if (const auto b = root["backend"]) {
      sc.backend = str(b, "backend");
      if (sc.backend != "gloo" && sc.backend != "nccl" && sc.backend != "auto")
        fail(b, "unknown backend '" + excerpt(sc.backend) + "'" + did_you_mean(sc.backend, {"gloo", "nccl", "auto"}) +
                    "; known: gloo, nccl, auto");
    }
    if (const auto d = root["device"]) {
      sc.device = str(d, "device");
      if (sc.device != "cpu" && sc.device != "cuda")
        fail(d, "unknown device '" + excerpt(sc.device) + "'" + did_you_mean(sc.device, {"cpu", "cuda"}) +
                    "; known: cpu, cuda");
    }
    if (root["dtype"]) sc.dtype = dtype(root["dtype"]);
    default_dtype_ = sc.dtype;
    if (const auto t = root["timeout"]) {
      sc.timeout_seconds = real(t, "timeout");
      if (auto why = bad_timeout(sc.timeout_seconds)) fail(t, "timeout " + *why);
    }
    if (const auto g = root["groups"]) {
      if (!g.is_map()) fail(g, "groups must map names to lists of ranks");
      for (const auto& kv : g.entries()) {
        Group grp;
        grp.name = std::string(kv.key.scalar());
        grp.mark = kv.value.mark();
        if (!kv.value.is_sequence() || kv.value.size() == 0)
          fail(kv.value, "group '" + excerpt(grp.name) + "' must be a non-empty list of ranks");
        for (const auto& r : kv.value) {
          grp.members.push_back(int_field(r, "a group member", 0, "a rank (0 or more)"));
        }
        std::set<int> uniq(grp.members.begin(), grp.members.end());
        if (uniq.size() != grp.members.size()) fail(kv.value, "group '" + excerpt(grp.name) + "' lists a rank twice");
        grp.members.assign(uniq.begin(), uniq.end());
        sc.groups.push_back(grp);
      }
    }
    if (const auto t = root["tensors"]) {
      if (!t.is_map()) fail(t, "tensors must map names to tensor specs");
      for (const auto& kv : t.entries()) {
        names_->intern(kv.key.scalar());
        sc.tensors.emplace_back(std::string(kv.key.scalar()), tensor_spec(kv.value));
      }
    }
    const auto steps = root["steps"];
    if (!steps) fail(root, "the scenario has no steps");
    if (!steps.is_sequence()) fail(steps, "steps must be a list");
    sc.steps.reserve(steps.size());
    int i = 0;
    for (const auto& st : steps) sc.steps.push_back(shared_step(st, i++));
    line_base_ = 0;
    alike_.clear();
    names_.reset();
    step_args_.reset();
    for (const auto& st : sc.steps) {
      if (st.group && !sc.find_group(st.group.view())) {
        std::vector<std::string> names;
        for (const auto& g : sc.groups) names.push_back(g.name);
        fail(st.at(st.args().group_mark),
             "unknown group '" + excerpt(st.group.str()) + "'" + did_you_mean(st.group.str(), names));
      }
    }
    return sc;
  }

 private:
  std::string file_;
  const OpTable& ops_;
  mutable DType default_dtype_ = DType::Float32;  // the scenario's, once read: literal fills are checked against it
  static constexpr size_t kAlikeSteps = 4096, kMaxAlikeKey = 512;
  mutable int line_base_ = 0;                                // the line of the step being read (here())
  mutable std::shared_ptr<Names> names_;                     // the scenario's being read
  mutable std::shared_ptr<std::deque<StepArgs>> step_args_;  // and its steps' arguments
  mutable std::unordered_map<std::string, Step> alike_;      // steps read, by what they are made of
};

}  // namespace

Scenario load_scenario_text(const std::string& file, std::string text, const OpTable& ops) {
  // The text lives in the tree (it holds most scalars' texts), and the tree is freed once the
  // model is built: the peak is text + tree + model.
  const YamlDocument doc = load_one_document(file, normalize_line_ends(std::move(text)));
  return Loader(file, ops).scenario(doc.root());
}

Scenario load_scenario(const std::string& path, const OpTable& ops) {
  return load_scenario_text(path, read_scenario_text(path), ops);
}

std::vector<int64_t> byte_size_range(int64_t min, int64_t max, double factor) {
  std::vector<int64_t> out;
  for (double s = double(min); s <= double(max) * (1 + 1e-12) && out.size() <= kMaxBenchSizes; s *= factor)
    out.push_back(int64_t(std::llround(s)));
  return out;
}

}  // namespace distrun::scenario
