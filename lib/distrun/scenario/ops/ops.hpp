// The op table: every OpSpec of op_collectives, op_local, op_objects and op_bench, in the
// order the format's documentation lists them. A scenario is loaded with it (loader.hpp).
#pragma once
#include <vector>

#include "distrun/scenario/model/op_table.hpp"

namespace distrun::scenario {

const OpTable& op_table();
/// The description of `op`, and its name in the format ("all_reduce", ...).
const OpSpec& op_spec(Op op);
const char* op_name(Op op);

/// The groups of the table, one per op_*.cpp file.
std::vector<OpSpec> collective_ops();
std::vector<OpSpec> local_ops();
std::vector<OpSpec> object_ops();
std::vector<OpSpec> bench_ops();

}  // namespace distrun::scenario
