// JSON that keeps every float: the results file and object steps carry inf, -inf, nan and
// -0.0 as they are. Standard JSON has no spelling for the first three, so the results file
// uses the one Python's json module reads and writes by default (NaN, Infinity, -Infinity);
// between ranks, where the transport speaks strict JSON, non-finite numbers travel as tagged
// strings and are restored on arrival.
#pragma once
#include <nlohmann/json.hpp>

#include <string>

namespace distrun::scenario {

/// `v` as one line of JSON, with NaN, Infinity and -Infinity for non-finite numbers (what
/// Python's json.loads accepts) and -0.0 kept.
std::string dump_lossless(const nlohmann::ordered_json& v);

/// Replaces each non-finite number by a tagged string, so strict JSON carries it.
nlohmann::ordered_json encode_nonfinite(const nlohmann::ordered_json& v);
/// Undoes encode_nonfinite().
nlohmann::ordered_json decode_nonfinite(const nlohmann::ordered_json& v);

/// Equality where nan equals nan (an object that holds nan is the object expected).
bool same_json(const nlohmann::ordered_json& a, const nlohmann::ordered_json& b);

}  // namespace distrun::scenario
