#include "distrun/scenario/load/yaml_guard.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include <yaml.h>

#include "distrun/scenario/model/source.hpp"

namespace distrun::scenario {

namespace {

// Refuses flow collections nested deeper than `max_depth` by scanning the raw text, before
// the parser sees it: its time is quadratic in the depth (a megabyte of '[' would not end). Quoted scalars and comments are skipped; a bracket inside a
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

}  // namespace

// Reads libyaml's events into a YamlDocument (aliases are not expanded, so this is linear in
// the text) and applies every rule as the events arrive: the expanded size is counted as it
// grows (an alias adds its anchor's expanded size), so a bomb is refused before it is built.
class YamlBuilder {
 public:
  YamlBuilder(const std::string& file, const YamlLimits& limits, YamlDocument& doc)
      : file_(file), limits_(limits), doc_(doc) {}

  void run(std::string source) {
    doc_.source_ = std::move(source);
    const std::string& text = doc_.source_;
    // Room for as many nodes as the text can hold (every node but an empty document's takes
    // at least a byte) and the limits allow: the tree never grows by copying, and the pages
    // it does not fill are never touched, so they cost no memory.
    const size_t most = std::min<size_t>(text.size() + 1, size_t(limits_.max_nodes + 1));
    doc_.nodes_.reserve(most);
    doc_.links_.reserve(most);
    pending_.reserve(most);
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) throw ConfigError(file_ + ":0:0: cannot start the YAML parser");
    yaml_parser_set_input_string(&parser, reinterpret_cast<const unsigned char*>(text.data()), text.size());
    try {
      for (bool done = false; !done;) {
        Event event(parser, file_);
        done = event.e.type == YAML_STREAM_END_EVENT;
        take(event.e);
      }
    } catch (...) {
      yaml_parser_delete(&parser);
      throw;
    }
    yaml_parser_delete(&parser);
    if (doc_.nodes_.empty()) doc_.nodes_.emplace_back();  // an empty file: a null root
  }

 private:
  using Kind = YamlDocument::Kind;
  // A file of a million nodes is a tree of 16 MB (docs/scenario.md's memory bound rests on it).
  static_assert(sizeof(YamlDocument::Node) == 16, "a YAML node is four 32-bit words");

  // One event, deleted when done with; a syntax error is thrown with its place.
  struct Event {
    Event(yaml_parser_t& parser, const std::string& file) {
      if (yaml_parser_parse(&parser, &e)) return;
      std::string problem = parser.problem ? parser.problem : "malformed YAML";
      if (parser.context) problem = std::string(parser.context) + ": " + problem;
      throw error_at(file, mark_of(parser.problem_mark), "YAML syntax error: " + problem);
    }
    ~Event() { yaml_event_delete(&e); }
    Event(const Event&) = delete;
    Event& operator=(const Event&) = delete;
    yaml_event_t e{};
  };

  // What a node expands to with its aliases: itself and every node below it, and its height.
  struct Extent {
    int64_t nodes = 1;
    int height = 0;
  };
  // A node an alias may name, with its extent once its collection has ended.
  struct Anchor {
    uint32_t node = 0;
    Extent extent;
    bool complete = false;
  };
  // A collection whose end has not come yet.
  struct Open {
    uint32_t node;
    size_t first;                               // where its children start in pending_
    Extent extent;                              // of the children so far
    Anchor* anchor;                             // the anchor naming it, if any
    std::unordered_set<std::string> keys = {};  // a large mapping's keys, for duplicates
  };

  static Mark mark_of(const yaml_mark_t& m) { return {int(m.line) + 1, int(m.column) + 1}; }
  [[noreturn]] void fail(Mark m, const std::string& message) const { throw error_at(file_, m, message); }

  void take(const yaml_event_t& e) {
    switch (e.type) {
      case YAML_DOCUMENT_START_EVENT: ++documents_; return;
      case YAML_SCALAR_EVENT:
      case YAML_ALIAS_EVENT:
      case YAML_SEQUENCE_START_EVENT:
      case YAML_MAPPING_START_EVENT: node(e); return;
      case YAML_SEQUENCE_END_EVENT:
      case YAML_MAPPING_END_EVENT: close(); return;
      default: return;
    }
  }

  void node(const yaml_event_t& e) {
    const Mark m = mark_of(e.start_mark);
    if (documents_ > 1) fail(m, "a scenario file holds one YAML document; a second one starts here");
    const int depth = int(open_.size());
    if (depth > limits_.max_depth) too_deep(m);
    const bool is_key = !open_.empty() && doc_.nodes_[open_.back().node].type() == Kind::Map &&
                        (pending_.size() - open_.back().first) % 2 == 0;
    uint32_t index = 0;
    Extent extent;
    Anchor* anchor = nullptr;
    bool opened = false;
    if (e.type == YAML_ALIAS_EVENT) {
      const std::string name = reinterpret_cast<const char*>(e.data.alias.anchor);
      const auto it = anchors_.find(name);
      if (it == anchors_.end())
        fail(m, "the alias *" + excerpt(name) + " has no anchor &" + excerpt(name) + " before it");
      if (!it->second.complete) fail(m, "the alias *" + excerpt(name) + " is inside its own anchor");
      index = it->second.node;
      extent = it->second.extent;
      count(m, extent.nodes);
      if (depth + extent.height > limits_.max_depth) too_deep(m);
    } else {
      if (doc_.nodes_.size() >= UINT32_MAX) fail(m, "the document has too many nodes");
      index = uint32_t(doc_.nodes_.size());
      YamlDocument::Node& n = doc_.nodes_.emplace_back();
      n.line = uint32_t(m.line);
      n.col = std::min<uint32_t>(uint32_t(m.col), (1u << 28) - 1);
      const unsigned char* anchor_name = nullptr;
      if (e.type == YAML_SCALAR_EVENT) {
        const auto& s = e.data.scalar;
        if (s.length > limits_.max_scalar_bytes)
          fail(m, "a scalar of " + std::to_string(s.length) + " bytes; at most " +
                      std::to_string(limits_.max_scalar_bytes) + " are read");
        const std::string_view text(reinterpret_cast<const char*>(s.value), s.length);
        n.count = uint32_t(s.length);
        // A scalar written as it reads (plain on one line, or quoted without escapes) is not
        // copied: its text is in the source, after its quote if any.
        const size_t at =
            e.start_mark.index +
            (s.style == YAML_SINGLE_QUOTED_SCALAR_STYLE || s.style == YAML_DOUBLE_QUOTED_SCALAR_STYLE ? 1 : 0);
        if (at + s.length <= doc_.source_.size() && at + s.length < UINT32_MAX &&
            std::string_view(doc_.source_).substr(at, s.length) == text) {
          n.first = uint32_t(at);
          n.in_source = 1;
        } else {
          if (doc_.texts_.size() + s.length >= UINT32_MAX) fail(m, "the document's scalars are too long");
          n.first = uint32_t(doc_.texts_.size());
          doc_.texts_.append(text);
        }
        n.quoted = s.style != YAML_PLAIN_SCALAR_STYLE ||
                   (s.tag && std::strcmp(reinterpret_cast<const char*>(s.tag), "!") == 0);
        n.kind = uint32_t(!n.quoted && is_null_word(text) ? Kind::Null : Kind::Scalar);
        anchor_name = s.anchor;
      } else if (e.type == YAML_SEQUENCE_START_EVENT) {
        n.kind = uint32_t(Kind::Sequence);
        anchor_name = e.data.sequence_start.anchor;
        opened = true;
      } else {
        n.kind = uint32_t(Kind::Map);
        anchor_name = e.data.mapping_start.anchor;
        opened = true;
      }
      if (anchor_name) {
        anchor = &anchors_[reinterpret_cast<const char*>(anchor_name)];
        *anchor = {index, extent, !opened};
      }
      count(m, 1);
    }
    if (is_key) key(m, index);
    if (!open_.empty()) pending_.push_back(index);
    if (opened)
      open_.push_back({index, pending_.size(), extent, anchor});
    else
      add_to_parent(extent);
  }

  std::string_view text_of(uint32_t index) const { return YamlNode(&doc_, index).scalar(); }

  // A mapping key: a scalar name, once per mapping.
  void key(Mark m, uint32_t index) {
    const Kind kind = doc_.nodes_[index].type();
    if (kind == Kind::Null) fail(m, "a mapping key must be a name, not null (quote it to mean the word)");
    if (kind != Kind::Scalar) fail(m, "a mapping key must be a plain name, not a list or a mapping");
    const std::string_view k = text_of(index);
    Open& o = open_.back();
    const size_t before = (pending_.size() - o.first) / 2;
    constexpr size_t kScanned = 16;  // small mappings (nearly all) are scanned
    bool repeated = false;
    if (before < kScanned) {
      for (size_t i = 0; i < before && !repeated; ++i) repeated = text_of(pending_[o.first + 2 * i]) == k;
    } else {
      if (o.keys.empty())
        for (size_t i = 0; i < before; ++i) o.keys.emplace(text_of(pending_[o.first + 2 * i]));
      repeated = !o.keys.emplace(k).second;
    }
    if (repeated) fail(m, "duplicate key '" + excerpt(std::string(k)) + "'");
  }

  void close() {
    const Open o = std::move(open_.back());
    open_.pop_back();
    YamlDocument::Node& n = doc_.nodes_[o.node];
    n.first = uint32_t(doc_.links_.size());
    n.count = uint32_t(pending_.size() - o.first);
    doc_.links_.insert(doc_.links_.end(), pending_.begin() + std::ptrdiff_t(o.first), pending_.end());
    pending_.resize(o.first);
    // An anchor named again inside its own collection now names that later node.
    if (o.anchor && o.anchor->node == o.node) {
      o.anchor->extent = o.extent;
      o.anchor->complete = true;
    }
    add_to_parent(o.extent);
  }

  // Adds a complete node's extent to the collection it is a value or an entry of.
  void add_to_parent(const Extent& child) {
    if (open_.empty()) return;
    Extent& parent = open_.back().extent;
    parent.nodes += child.nodes;
    parent.height = std::max(parent.height, child.height + 1);
  }

  static bool is_null_word(std::string_view s) {
    return s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL";
  }

  void count(Mark m, int64_t more) {
    nodes_ += more;
    if (nodes_ > limits_.max_nodes)
      fail(m, "the document expands to more than " + std::to_string(limits_.max_nodes) +
                  " nodes (aliases count each time they are used)");
  }

  [[noreturn]] void too_deep(Mark m) const {
    fail(m, "the document nests deeper than " + std::to_string(limits_.max_depth) +
                " levels (aliases count each time they are used)");
  }

  const std::string& file_;
  const YamlLimits& limits_;
  YamlDocument& doc_;
  std::vector<Open> open_;
  std::vector<uint32_t> pending_;  // the children of the open collections, innermost last
  std::unordered_map<std::string, Anchor> anchors_;
  int64_t nodes_ = 0;
  int documents_ = 0;
};

YamlDocument load_one_document(const std::string& file, std::string text, const YamlLimits& limits) {
  check_flow_depth(file, text, limits.max_depth);
  YamlDocument doc;
  YamlBuilder(file, limits, doc).run(std::move(text));
  return doc;
}

bool YamlNode::is_null() const { return doc_ && doc_->nodes_[index_].type() == YamlDocument::Kind::Null; }
bool YamlNode::is_scalar() const { return doc_ && doc_->nodes_[index_].type() == YamlDocument::Kind::Scalar; }
bool YamlNode::is_sequence() const { return doc_ && doc_->nodes_[index_].type() == YamlDocument::Kind::Sequence; }
bool YamlNode::is_map() const { return doc_ && doc_->nodes_[index_].type() == YamlDocument::Kind::Map; }
bool YamlNode::is_quoted() const { return doc_ && doc_->nodes_[index_].quoted; }

std::string_view YamlNode::scalar() const {
  if (!is_scalar()) return {};
  const auto& n = doc_->nodes_[index_];
  return std::string_view(n.in_source ? doc_->source_ : doc_->texts_).substr(n.first, n.count);
}

size_t YamlNode::size() const {
  if (!doc_) return 0;
  const auto& n = doc_->nodes_[index_];
  if (n.type() == YamlDocument::Kind::Map) return n.count / 2;
  return n.type() == YamlDocument::Kind::Sequence ? n.count : 0;
}

Mark YamlNode::mark() const {
  if (!doc_) return {};
  const auto& n = doc_->nodes_[index_];
  return {int(n.line), int(n.col)};
}

YamlNode YamlNode::item(size_t i) const { return {doc_, doc_->links_[doc_->nodes_[index_].first + i]}; }
YamlNode YamlNode::key(size_t i) const { return item(2 * i); }
YamlNode YamlNode::value(size_t i) const { return item(2 * i + 1); }

YamlNode YamlNode::operator[](std::string_view k) const {
  if (!is_map()) return {};
  for (size_t i = 0, n = size(); i < n; ++i)
    if (key(i).scalar() == k) return value(i);
  return {};
}

std::vector<YamlNode::Entry> YamlNode::entries() const {
  std::vector<Entry> out;
  if (!is_map()) return out;
  out.reserve(size());
  for (size_t i = 0, n = size(); i < n; ++i) out.push_back({key(i), value(i)});
  return out;
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

CoreScalar resolve_scalar(const YamlNode& n) {
  CoreScalar out;
  if (n.is_null()) {
    out.kind = CoreScalar::Null;
    return out;
  }
  if (!n.is_scalar() || n.is_quoted()) return out;  // quoted: a string whatever it spells
  const std::string_view s = n.scalar();
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
