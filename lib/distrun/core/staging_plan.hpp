// How a strided copy between host and device memory is cut into pieces that each fit one half of
// the pinned staging buffer (host_staging.hpp). Pure arithmetic, kept apart so the CPU suite can
// check it: every byte of the copy lands in exactly one piece, and no piece exceeds the buffer.
#pragma once
#include <cstddef>
#include <vector>

namespace distrun {

/// Rows [row, row + rows) of the copy, bytes [col, col + width) of each of those rows.
struct StagingPiece {
  size_t row = 0, rows = 0, col = 0, width = 0;
  size_t bytes() const { return rows * width; }
};

/// Pieces of a copy of `height` rows of `width` bytes through a buffer of `chunk` bytes: whole
/// rows, as many as fit, when a row fits; else each row on its own in chunk-sized parts.
inline std::vector<StagingPiece> plan_staging(size_t width, size_t height, size_t chunk) {
  std::vector<StagingPiece> pieces;
  if (width == 0 || height == 0 || chunk == 0) return pieces;
  if (width <= chunk) {
    const size_t per = chunk / width;
    for (size_t r = 0; r < height; r += per) pieces.push_back({r, r + per <= height ? per : height - r, 0, width});
    return pieces;
  }
  for (size_t r = 0; r < height; ++r)
    for (size_t c = 0; c < width; c += chunk) pieces.push_back({r, 1, c, c + chunk <= width ? chunk : width - c});
  return pieces;
}

}  // namespace distrun
