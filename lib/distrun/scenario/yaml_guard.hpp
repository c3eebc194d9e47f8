// Reading a scenario's YAML safely and by one set of rules: exactly one document, bounded
// alias expansion and nesting (a "billion laughs" file is refused in bounded time and memory
// instead of growing until the allocator aborts), no duplicate keys, and plain scalars read
// by the YAML 1.2 core schema (`yes` and `on` are strings and `017` is seventeen; PyYAML
// follows YAML 1.1 there and reads booleans and octal).
#pragma once
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <string>

namespace distrun::scenario {

/// How much a scenario's YAML may expand to, counting every node reached through an alias
/// as often as it is reached.
struct YamlLimits {
  int64_t max_nodes = 1'000'000;
  int max_depth = 64;
  /// The longest scalar: names, expressions and texts are short, and yaml-cpp reads a long
  /// one slowly (a one-line 16 MB name took 5 s), so it is refused before yaml-cpp sees it.
  size_t max_scalar_bytes = 1 << 20;
};

/// Parses `text` as exactly one YAML document and checks it against `limits` (every node
/// visited once per path, so aliases count as often as they are used) and for duplicate
/// mapping keys. ConfigError `file:line:col: message` otherwise. An empty text gives a null
/// node.
YAML::Node load_one_document(const std::string& file, const std::string& text, const YamlLimits& limits = {});

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
CoreScalar resolve_scalar(const YAML::Node& n);

}  // namespace distrun::scenario
