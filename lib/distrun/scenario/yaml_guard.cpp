#include "distrun/scenario/yaml_guard.hpp"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <tuple>
#include <algorithm>
#include <charconv>
#include <string_view>
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
        if (kv.first.IsNull())
          throw error_at(file_, mark_of(kv.first),
                         "a mapping key must be a name, not null (quote it to mean the word)");
        if (!kv.first.IsScalar())
          throw error_at(file_, mark_of(kv.first), "a mapping key must be a plain name, not a list or a mapping");
        if (!keys.insert(kv.first.Scalar()).second)
          throw error_at(file_, mark_of(kv.first), "duplicate key '" + excerpt(kv.first.Scalar()) + "'");
        child(kv.second);
      }
    }
    if (!m.is_null()) seen_.emplace(key, e);
    return e;
  }

  void count(const YAML::Node& n, int64_t more) {
    nodes_ += more;
    if (nodes_ > limits_.max_nodes)
      throw error_at(file_, mark_of(n),
                     "the document expands to more than " + std::to_string(limits_.max_nodes) +
                         " nodes (aliases count each time they are used)");
  }

  [[noreturn]] void too_deep(const YAML::Node& n) const {
    throw error_at(file_, mark_of(n),
                   "the document nests deeper than " + std::to_string(limits_.max_depth) +
                       " levels (aliases count each time they are used)");
  }

  const std::string& file_;
  const YamlLimits& limits_;
  int64_t nodes_ = 0;
  std::map<std::tuple<int, int, int, int, std::size_t>, Extent> seen_;
};
// Refuses flow collections nested deeper than `max_depth` by scanning the raw text, before
// either parser sees it: both take time quadratic in the depth (24 000 levels took 12 s, a
// megabyte of '[' did not end). Quoted scalars and comments are skipped; a bracket inside a
// plain block scalar counts as well, which can only refuse a file that nests this deep by
// appearance.
void check_flow_depth(const std::string& file, const std::string& text, int max_depth) {
  int depth = 0, line = 1, col = 0;
  char quote = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    ++col;
    if (c == '\n') {
      ++line, col = 0;
      continue;
    }
    if (quote) {
      if ((quote == '"' && c == '\\') || (quote == '\'' && c == '\'' && i + 1 < text.size() && text[i + 1] == '\''))
        ++i, ++col;
      else if (c == quote)
        quote = 0;
      continue;
    }
    if (c == '#' && (i == 0 || text[i - 1] == ' ' || text[i - 1] == '\t' || text[i - 1] == '\n')) {
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
      continue;
    }
    // A quote opens a scalar only where one may start (not inside a word such as it's).
    if ((c == '"' || c == '\'') && (i == 0 || std::strchr(" \t\n[{,:-", text[i - 1]) != nullptr)) {
      quote = c;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth)
        throw error_at(file, Mark{line, col},
                       "the document nests deeper than " + std::to_string(max_depth) + " levels");
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

// Parses `text` with libyaml, events only (aliases are not expanded, so this is linear), and
// throws the first syntax error, or the first scalar longer than `max_scalar`, with its position. yaml-cpp 0.7 can loop forever on some
// malformed flow collections (found by fuzz_scenario), so it only sees text libyaml accepted.
void check_syntax(const std::string& file, const std::string& text, size_t max_scalar) {
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
      problem = "YAML syntax error: " + problem;
      where = Mark{int(parser.problem_mark.line) + 1, int(parser.problem_mark.column) + 1};
      break;
    }
    done = event.type == YAML_STREAM_END_EVENT;
    if (event.type == YAML_SCALAR_EVENT && event.data.scalar.length > max_scalar) {
      problem = "a scalar of " + std::to_string(event.data.scalar.length) + " bytes; at most " +
                std::to_string(max_scalar) + " are read";
      where = Mark{int(event.start_mark.line) + 1, int(event.start_mark.column) + 1};
      yaml_event_delete(&event);
      break;
    }
    yaml_event_delete(&event);
  }
  yaml_parser_delete(&parser);
  if (!problem.empty()) throw error_at(file, where, problem);
}

}  // namespace

YAML::Node load_one_document(const std::string& file, const std::string& text, const YamlLimits& limits) {
  check_flow_depth(file, text, limits.max_depth);
  check_syntax(file, text, limits.max_scalar_bytes);
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

namespace {

// The core schema's patterns, matched by hand in one pass each: a scalar may be megabytes
// long, and std::regex recurses once per character (a 30 000-digit number overflowed the
// stack).
bool all_of(std::string_view s, bool (*ok)(char)) { return !s.empty() && std::all_of(s.begin(), s.end(), ok); }
bool is_dec(char c) { return c >= '0' && c <= '9'; }
bool is_oct(char c) { return c >= '0' && c <= '7'; }
bool is_hex(char c) { return is_dec(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
std::string_view unsigned_part(std::string_view s) {
  return !s.empty() && (s[0] == '-' || s[0] == '+') ? s.substr(1) : s;
}

// [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
bool is_core_float(std::string_view s) {
  s = unsigned_part(s);
  size_t i = 0, int_digits = 0, frac_digits = 0;
  while (i < s.size() && is_dec(s[i])) ++i, ++int_digits;
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && is_dec(s[i])) ++i, ++frac_digits;
  }
  if (int_digits == 0 && frac_digits == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
    return all_of(s.substr(i), is_dec);
  }
  return i == s.size();
}

bool one_of(std::string_view s, std::string_view a, std::string_view b, std::string_view c) {
  return s == a || s == b || s == c;
}

}  // namespace

CoreScalar resolve_scalar(const YAML::Node& n) {
  CoreScalar out;
  if (n.IsNull()) {
    out.kind = CoreScalar::Null;
    return out;
  }
  if (!n.IsScalar() || n.Tag() == "!") return out;  // quoted: a string whatever it spells
  const std::string_view s = n.Scalar();
  if (one_of(s, "true", "True", "TRUE") || one_of(s, "false", "False", "FALSE")) {
    out.kind = CoreScalar::Bool;
    out.boolean = s[0] == 't' || s[0] == 'T';
    return out;
  }
  // Integers: decimal with a sign, 0o octal, 0x hexadecimal; read exactly, never through a double.
  const bool negative = !s.empty() && s[0] == '-';
  std::string_view digits;
  int base = 0;
  if (all_of(unsigned_part(s), is_dec)) {
    digits = unsigned_part(s), base = 10;
  } else if (s.size() > 2 && s.substr(0, 2) == "0o" && all_of(s.substr(2), is_oct)) {
    digits = s.substr(2), base = 8;
  } else if (s.size() > 2 && s.substr(0, 2) == "0x" && all_of(s.substr(2), is_hex)) {
    digits = s.substr(2), base = 16;
  }
  if (base) {
    out.kind = CoreScalar::Int;
    uint64_t magnitude = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), magnitude, base);
    (void)end;
    if (ec == std::errc()) {
      out.fits_uint64 = !negative;
      out.uinteger = magnitude;
      if (negative ? magnitude <= uint64_t(1) << 63 : magnitude <= uint64_t(INT64_MAX)) {
        out.fits_int64 = true;
        out.integer = negative ? int64_t(0 - magnitude) : int64_t(magnitude);
      }
      out.real = negative ? -double(magnitude) : double(magnitude);
    } else {
      out.real = negative ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
    }
    return out;
  }
  if (is_core_float(s)) {
    out.kind = CoreScalar::Float;
    out.real = std::strtod(std::string(s).c_str(), nullptr);
    return out;
  }
  const std::string_view u = unsigned_part(s);
  if (one_of(u, ".inf", ".Inf", ".INF")) {
    out.kind = CoreScalar::Float;
    out.real = negative ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
    return out;
  }
  if (one_of(s, ".nan", ".NaN", ".NAN")) {
    out.kind = CoreScalar::Float;
    out.real = std::numeric_limits<double>::quiet_NaN();
    return out;
  }
  return out;
}

}  // namespace distrun::scenario
