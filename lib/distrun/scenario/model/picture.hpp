// What --explain draws of one step: each member's tensor before and after it, as blocks
// named by where they came from. An op's description (op_table.hpp) says how to draw it, so
// the types sit with the model; output/explain.hpp draws them.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace distrun::scenario {

/// One block of a member's tensor: `from` is a global rank (-1: the reduction over all).
struct Block {
  int from = -1;
  int chunk = -1;     // -1: the whole tensor
  int64_t size = -1;  // the chunk's size along dim where chunks are uneven (split_sizes), else -1
};

/// One member's tensor before and after a step (`after` empty: no result there).
struct RankPicture {
  int rank = 0;
  std::vector<Block> before, after;
  bool has_after = true;
};

struct Picture {
  std::vector<RankPicture> ranks;
  bool column_blocks = false;  // dim 1 or more: blocks side by side
  std::string note;            // a sentence instead of (or under) the blocks
};

}  // namespace distrun::scenario
