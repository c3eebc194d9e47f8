// --explain: per step, a small picture of who sends what to whom. Each member's tensor is
// drawn as blocks (row blocks stacked for dim 0, blocks side by side for dim 1 and beyond),
// before and after the step, each block named by where it came from ("2" rank 2's tensor,
// "2.1" chunk 1 of it, "Σ" the reduction over the members, "Σ.1" chunk 1 of that; "2.1(3)"
// a chunk of 3 along dim where split_sizes make chunks uneven) and, on a terminal, coloured
// by the rank it came from. Object steps move whole objects.
#pragma once
#include <ostream>
#include <string>
#include <vector>

#include "distrun/scenario/model/model.hpp"
#include "distrun/scenario/model/picture.hpp"

namespace distrun::scenario {

/// The usual pictures, for the op table's `picture` entries. `members`: global ranks of the
/// step, ascending.
Picture whole_from(const Step& s, const std::vector<int>& members, int src, bool only_dst);  // broadcast, send_recv
Picture scatter_picture(const Step& s, const std::vector<int>& members, bool reduced);       // scatter, reduce_scatter
Picture gather_picture(const Step& s, const std::vector<int>& members, int only_dst);        // gather (-1: all_gather)
Picture reduce_picture(const Step& s, const std::vector<int>& members, int only_dst);        // reduce (-1: all_reduce)
Picture all_to_all_picture(const Step& s, const std::vector<int>& members);

/// Writes the pictures of every step of `sc` for a world of `world_size` ranks; `colour`:
/// ANSI colours by source rank; `values`: under each picture, every member's input and result
/// values as the reference computes them (every rank's, so for small scenarios).
void explain(const Scenario& sc, int world_size, std::ostream& out, bool colour, bool values = false);

}  // namespace distrun::scenario
