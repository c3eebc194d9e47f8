#include "distrun/scenario/yaml_guard.hpp"

#include <cerrno>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>
#include <algorithm>
#include <regex>
#include <set>

#include <yaml.h>

#include "distrun/scenario/source.hpp"

namespace distrun::scenario {

namespace {

// Counts the document as if every alias were expanded, without expanding it: an alias is the
// same node as its anchor (yaml-cpp shares it), so each distinct node is walked once and its
// expanded size and height are remembered and added again at every use. Walking a bomb of
// 10^9 virtual nodes thus costs its few dozen real ones.
class Walker {
 public:
  Walker(const std::string& file, const YamlLimits& limits) : file_(file), limits_(limits) {}

  void walk_document(const YAML::Node& n) { walk(n, 0); }

 private:
  struct Extent {
    int64_t nodes = 0;  // this node and everything below it, aliases expanded
    int height = 0;     // levels below it
  };

  Extent walk(const YAML::Node& n, int depth) {
    if (depth > limits_.max_depth) too_deep(n);
    // Identity of the underlying node: where it starts in the text and what it is (an alias
    // reports its anchor's position, so every use of one anchor meets the same entry).
    const YAML::Mark m = n.Mark();
    const auto key = std::make_tuple(m.pos, m.line, m.column, int(n.Type()), n.size());
    if (auto it = seen_.find(key); it != seen_.end()) {
      count(n, it->second.nodes);
      if (depth + it->second.height > limits_.max_depth) too_deep(n);
      return it->second;
    }
    Extent e;
    e.nodes = 1;
    count(n, 1);
    auto child = [&](const YAML::Node& c) {
      const Extent ce = walk(c, depth + 1);
      e.nodes += ce.nodes;
      e.height = std::max(e.height, ce.height + 1);
    };
    if (n.IsSequence()) {
      for (const auto& c : n) child(c);
    } else if (n.IsMap()) {
      std::set<std::string> keys;
      for (const auto& kv : n) {
        if (!kv.first.IsScalar())
          throw error_at(file_, mark_of(kv.first), "a mapping key must be a plain name, not a list or a mapping");
        if (!keys.insert(kv.first.Scalar()).second)
          throw error_at(file_, mark_of(kv.first), "duplicate key '" + kv.first.Scalar() + "'");
        child(kv.second);
      }
    }
    if (!m.is_null()) seen_.emplace(key, e);
    return e;
  }

  void count(const YAML::Node& n, int64_t more) {
    nodes_ += more;
    if (nodes_ > limits_.max_nodes)
      throw error_at(file_, mark_of(n), "the document expands to more than " + std::to_string(limits_.max_nodes) +
                                            " nodes (aliases count each time they are used)");
  }

  [[noreturn]] void too_deep(const YAML::Node& n) const {
    throw error_at(file_, mark_of(n), "the document nests deeper than " + std::to_string(limits_.max_depth) +
                                          " levels (aliases count each time they are used)");
  }

  const std::string& file_;
  const YamlLimits& limits_;
  int64_t nodes_ = 0;
  std::map<std::tuple<int, int, int, int, std::size_t>, Extent> seen_;
};
// Parses `text` with libyaml, events only (aliases are not expanded, so this is linear), and
// throws the first syntax error with its position. yaml-cpp 0.7 can loop forever on some
// malformed flow collections (found by fuzz_scenario), so it only sees text libyaml accepted.
void check_syntax(const std::string& file, const std::string& text) {
  yaml_parser_t parser;
  if (!yaml_parser_initialize(&parser)) throw ConfigError(file + ":0:0: cannot start the YAML parser");
  yaml_parser_set_input_string(&parser, reinterpret_cast<const unsigned char*>(text.data()), text.size());
  std::string problem;
  Mark where;
  for (bool done = false; !done;) {
    yaml_event_t event;
    if (!yaml_parser_parse(&parser, &event)) {
      problem = parser.problem ? parser.problem : "malformed YAML";
      if (parser.context) problem = std::string(parser.context) + ": " + problem;
      where = Mark{int(parser.problem_mark.line) + 1, int(parser.problem_mark.column) + 1};
      break;
    }
    done = event.type == YAML_STREAM_END_EVENT;
    yaml_event_delete(&event);
  }
  yaml_parser_delete(&parser);
  if (!problem.empty()) throw error_at(file, where, "YAML syntax error: " + problem);
}

}  // namespace

YAML::Node load_one_document(const std::string& file, const std::string& text, const YamlLimits& limits) {
  check_syntax(file, text);
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAll(text);
  } catch (const YAML::Exception& e) {
    Mark m = e.mark.is_null() ? Mark{} : Mark{e.mark.line + 1, e.mark.column + 1};
    throw error_at(file, m, "YAML syntax error: " + e.msg);
  }
  if (docs.empty()) return YAML::Node();
  if (docs.size() > 1)
    throw error_at(file, mark_of(docs[1]), "a scenario file holds one YAML document; a second one starts here");
  Walker(file, limits).walk_document(docs[0]);
  return docs[0];
}

CoreScalar resolve_scalar(const YAML::Node& n) {
  CoreScalar out;
  if (n.IsNull()) {
    out.kind = CoreScalar::Null;
    return out;
  }
  if (!n.IsScalar() || n.Tag() == "!") return out;  // quoted: a string whatever it spells
  const std::string& s = n.Scalar();
  if (s == "true" || s == "True" || s == "TRUE" || s == "false" || s == "False" || s == "FALSE") {
    out.kind = CoreScalar::Bool;
    out.boolean = s[0] == 't' || s[0] == 'T';
    return out;
  }
  static const std::regex dec_int("[-+]?[0-9]+"), oct_int("0o[0-7]+"), hex_int("0x[0-9a-fA-F]+");
  static const std::regex dec_float("[-+]?(\\.[0-9]+|[0-9]+(\\.[0-9]*)?)([eE][-+]?[0-9]+)?");
  static const std::regex inf_float("[-+]?\\.(inf|Inf|INF)"), nan_float("\\.(nan|NaN|NAN)");
  const int base = std::regex_match(s, dec_int) ? 10 : std::regex_match(s, oct_int) ? 8
                                                     : std::regex_match(s, hex_int) ? 16 : 0;
  if (base) {
    const char* digits = base == 10 ? s.c_str() : s.c_str() + 2;
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(digits, &end, base);
    if (errno == 0) {
      out.kind = CoreScalar::Int;
      out.integer = v;
      out.real = double(v);
      return out;
    }
    out.kind = CoreScalar::Float;  // beyond int64: keep its magnitude as a float
    out.real = base == 10 ? std::strtod(s.c_str(), nullptr) : double(std::strtoull(digits, nullptr, base));
    return out;
  }
  if (std::regex_match(s, dec_float)) {
    out.kind = CoreScalar::Float;
    out.real = std::strtod(s.c_str(), nullptr);
    return out;
  }
  if (std::regex_match(s, inf_float)) {
    out.kind = CoreScalar::Float;
    out.real = s[0] == '-' ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
    return out;
  }
  if (std::regex_match(s, nan_float)) {
    out.kind = CoreScalar::Float;
    out.real = std::numeric_limits<double>::quiet_NaN();
    return out;
  }
  return out;
}

}  // namespace distrun::scenario
