// Reading a scenario's YAML safely and by one set of rules: exactly one document, bounded
// alias expansion and nesting (a "billion laughs" file is refused in bounded time and memory
// instead of growing until the allocator aborts), no duplicate keys, and plain scalars read
// by the YAML 1.2 core schema (`yes` and `on` are strings and `017` is seventeen; PyYAML
// follows YAML 1.1 there and reads booleans and octal).
//
// The document is read from libyaml's events into a compact tree of our own, in one pass
// that applies every rule as it goes, so checking costs little more than the parse itself.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "distrun/scenario/model/source.hpp"

namespace distrun::scenario {

/// How much a scenario's YAML may expand to, counting every node (keys as well) reached
/// through an alias as often as it is reached.
struct YamlLimits {
  int64_t max_nodes = 1'000'000;
  int max_depth = 64;
  /// The longest scalar: names, expressions and texts are short.
  size_t max_scalar_bytes = 1 << 20;
};

class YamlDocument;

/// One node of a YamlDocument: a handle of two words, valid while the document lives. A
/// handle to no node (a key the mapping lacks) is false. An alias is the node of its anchor.
class YamlNode {
 public:
  YamlNode() = default;
  explicit operator bool() const { return doc_ != nullptr; }

  bool is_null() const;  // `~`, `null` (three spellings) or nothing, written plain
  bool is_scalar() const;
  bool is_sequence() const;
  bool is_map() const;
  /// A quoted or block scalar: a string whatever it spells.
  bool is_quoted() const;
  /// The text of a scalar ("" for any other node), valid while the document lives.
  std::string_view scalar() const;
  /// Entries of a sequence or a mapping, 0 for others.
  size_t size() const;
  /// Where the node starts (its anchor's place, for an alias).
  Mark mark() const;

  /// The value under `key` in a mapping; a false handle when absent or not a mapping.
  YamlNode operator[](std::string_view key) const;

  /// The i-th entry of a sequence; for a mapping, the i-th key and value.
  YamlNode item(size_t i) const;
  YamlNode key(size_t i) const;
  YamlNode value(size_t i) const;

  /// A sequence's entries, in order: `for (YamlNode c : n)`.
  class Iterator;
  Iterator begin() const;
  Iterator end() const;

  /// A mapping's keys and values, in order: `for (const auto& kv : n.entries())`.
  struct Entry;
  std::vector<Entry> entries() const;

 private:
  friend class YamlDocument;
  friend class YamlBuilder;
  YamlNode(const YamlDocument* doc, uint32_t index) : doc_(doc), index_(index) {}
  const YamlDocument* doc_ = nullptr;
  uint32_t index_ = 0;
};

class YamlNode::Iterator {
 public:
  Iterator(YamlNode n, size_t i) : n_(n), i_(i) {}
  YamlNode operator*() const { return n_.item(i_); }
  Iterator& operator++() { return ++i_, *this; }
  bool operator!=(const Iterator& o) const { return i_ != o.i_; }

 private:
  YamlNode n_;
  size_t i_;
};
inline YamlNode::Iterator YamlNode::begin() const { return {*this, 0}; }
inline YamlNode::Iterator YamlNode::end() const { return {*this, is_sequence() ? size() : 0}; }

struct YamlNode::Entry {
  YamlNode key, value;
};

/// A parsed scenario document: its nodes, the children of each collection (a mapping's as
/// key, value, key, value...) and its source text, which holds most scalars' texts as they are
/// written (the rest, unescaped or folded, end to end beside it). A node is 16 bytes: a file of
/// a million nodes is a tree of about 20 MB besides its text. Not copyable: its handles point
/// into it.
class YamlDocument {
 public:
  YamlDocument() = default;
  YamlDocument(const YamlDocument&) = delete;
  YamlDocument& operator=(const YamlDocument&) = delete;
  YamlDocument(YamlDocument&&) = default;
  YamlDocument& operator=(YamlDocument&&) = default;

  /// The document's root: a null node for an empty file.
  YamlNode root() const { return {this, 0}; }

 private:
  friend class YamlNode;
  friend class YamlBuilder;
  enum class Kind : uint8_t { Null, Scalar, Sequence, Map };
  struct Node {
    Node() : col(0), kind(uint32_t(Kind::Null)), quoted(0), in_source(0) {}
    uint32_t line = 0;
    uint32_t col : 28;  // a longer line is marked at its 2^28-1th column
    uint32_t kind : 2;
    uint32_t quoted : 1;
    uint32_t in_source : 1;  // a scalar's text is source_[first, first + count), else texts_'s
    uint32_t first = 0;      // a collection's children: links_[first, first + count)
    uint32_t count = 0;

    Kind type() const { return Kind(kind); }
  };
  std::vector<Node> nodes_;
  std::vector<uint32_t> links_;
  std::string source_;
  std::string texts_;
};

/// Parses `text` as exactly one YAML document and checks it against `limits` (aliases count
/// as often as they are used) and for duplicate or non-scalar mapping keys. ConfigError
/// `file:line:col: message` otherwise. An empty text gives a null root. The document keeps
/// the text.
YamlDocument load_one_document(const std::string& file, std::string text, const YamlLimits& limits = {});

/// What a scalar means under the YAML 1.2 core schema.
struct CoreScalar {
  enum Kind { Null, Bool, Int, Float, String } kind = String;
  bool boolean = false;
  // Int: the exact value where it fits (an integer is never read through a double).
  bool fits_int64 = false;
  bool fits_uint64 = false;
  int64_t integer = 0;    // when fits_int64
  uint64_t uinteger = 0;  // when fits_uint64
  double real = 0;        // Int (rounded to a double; +-inf beyond uint64) and Float
};

/// Resolves `n` (a scalar, or null): quoted scalars are always strings; plain ones follow the
/// core schema (null ~ Null NULL, true/false in three spellings, decimal/0o/0x integers,
/// decimal floats, .inf -.inf .nan). Linear in the scalar's length.
CoreScalar resolve_scalar(const YamlNode& n);

}  // namespace distrun::scenario
