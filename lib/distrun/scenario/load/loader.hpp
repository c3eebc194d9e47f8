// Reads a scenario file into a Scenario, checking everything that does not depend on the
// world size: YAML syntax, UTF-8, known ops and keys (with suggestions), value types,
// expressions (parsed here) and reduce ops against dtypes. Errors are ConfigError
// "file:line:col: message".
#pragma once
#include <string>

#include "distrun/scenario/model/limits.hpp"
#include "distrun/scenario/model/model.hpp"
#include "distrun/scenario/model/op_table.hpp"

namespace distrun::scenario {

/// Loads and checks the file at `path`, reading its ops with `ops` (ops/ops.hpp's op_table();
/// run/api.hpp loads with it).
Scenario load_scenario(const std::string& path, const OpTable& ops);
/// Loads from `text`, naming it `file` in errors (for tests).
Scenario load_scenario_text(const std::string& file, std::string text, const OpTable& ops);

/// The most sizes one bench step may list (or {min, max, factor} may make).
constexpr size_t kMaxBenchSizes = 64;
/// The most an object step's `object` may expand to: a byte per node plus its keys' and
/// strings' lengths, aliases counted each time they are used.
constexpr size_t kMaxObjectBytes = 64 * 1024;
/// The sizes {min, max, factor} describes: min, min*factor, ... up to max inclusive (at most
/// kMaxBenchSizes + 1, so a caller can tell a list that was cut).
std::vector<int64_t> byte_size_range(int64_t min, int64_t max, double factor);

}  // namespace distrun::scenario
