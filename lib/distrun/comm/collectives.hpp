// torch.distributed-style collectives on top of a Backend: splitting and concatenating along
// any dimension (0 = row-wise, 1 = column-wise), uneven all_to_all, and object collectives
// over a JSON serialized form. Column blocks are packed with one strided copy per block.
#pragma once
#include <nlohmann/json.hpp>
#include <vector>

#include "distrun/backend/backend.hpp"

namespace distrun {

/// Every rank's `in` concatenated along `dim` in rank order.
Tensor all_gather(Backend& b, const Tensor& in, int dim, const CollectiveOptions& o = {});
/// As all_gather, on `root` (a group rank) only; an undefined tensor elsewhere.
Tensor gather(Backend& b, const Tensor& in, int root, int dim, const CollectiveOptions& o = {});
/// Chunk `rank` of root's `in` split into size() pieces along `dim`. Every rank passes an
/// `in` of the same shape (its values only matter on root).
Tensor scatter(Backend& b, const Tensor& in, int root, int dim, const CollectiveOptions& o = {});
/// Chunk `rank` along `dim` of the elementwise reduction of every rank's `in`.
Tensor reduce_scatter(Backend& b, const Tensor& in, int dim, ReduceOp op, const CollectiveOptions& o = {});
/// Chunk j of `in` along `dim` goes to rank j; the received chunks concatenated along `dim`.
/// `split_sizes` (sizes along dim, one per rank) makes it uneven; empty means equal chunks.
Tensor all_to_all(Backend& b, const Tensor& in, int dim, const std::vector<int64_t>& split_sizes = {},
                  const CollectiveOptions& o = {});

/// Every rank's object, in rank order.
std::vector<nlohmann::ordered_json> all_gather_object(Backend& b, const nlohmann::ordered_json& obj,
                                                      const CollectiveOptions& o = {});
/// On root, every rank's object in rank order; elsewhere an empty list.
std::vector<nlohmann::ordered_json> gather_object(Backend& b, const nlohmann::ordered_json& obj, int root,
                                                  const CollectiveOptions& o = {});
/// Root's object on every rank.
nlohmann::ordered_json broadcast_object(Backend& b, const nlohmann::ordered_json& obj, int root,
                                        const CollectiveOptions& o = {});

}  // namespace distrun
