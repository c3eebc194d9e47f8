// The NCCL backend's argument checks, which run before anything touches a device.
#include <catch2/catch.hpp>

#include "distrun/core/error.hpp"
#include "distrun/nccl/nccl_args.hpp"

using namespace distrun;
using namespace distrun::nccl;
using Catch::Matchers::Contains;

TEST_CASE("a CPU tensor is refused with the devices named", "[nccl]") {
  Tensor t = Tensor::zeros({4}, DType::Float32);
  CHECK_THROWS_WITH(check_on_device("all_reduce", t, 1),
                    Contains("all_reduce") && Contains("cpu") && Contains("cuda:1"));
  CHECK_THROWS_AS(check_on_device("all_reduce", Tensor(), 0), BackendError);
}

TEST_CASE("element counts, dtypes and peers are checked", "[nccl]") {
  Tensor a = Tensor::zeros({2, 3}, DType::Float32), b = Tensor::zeros({6}, DType::Int32);
  CHECK_NOTHROW(check_numel("gather", a, 6));
  CHECK_THROWS_WITH(check_numel("gather", a, 12), Contains("6 elements, expected 12"));
  CHECK_NOTHROW(check_same_dtype("all_gather", a, a));
  CHECK_THROWS_WITH(check_same_dtype("all_gather", a, b), Contains("float32") && Contains("int32"));
  CHECK_NOTHROW(check_peer("broadcast (root)", 3, 4));
  CHECK_THROWS_WITH(check_peer("broadcast (root)", 4, 4), Contains("bad rank 4"));
  CHECK_THROWS_AS(check_peer("broadcast (root)", -1, 4), BackendError);
  CHECK_THROWS_WITH(check_peer("send (destination)", 2, 4, 2), Contains("this rank is 2"));
}

TEST_CASE("an even all_to_all splits into equal blocks in rank order", "[nccl]") {
  Tensor in = Tensor::zeros({4, 3}, DType::Float32), out = Tensor::zeros({12}, DType::Float32);
  AllToAllLayout l = all_to_all_layout(in, out, {}, {}, 4);
  CHECK(l.send_counts == std::vector<size_t>{3, 3, 3, 3});
  CHECK(l.recv_counts == l.send_counts);
  CHECK(l.send_offsets == std::vector<size_t>{0, 3, 6, 9});
  CHECK(l.recv_offsets == l.send_offsets);
  CHECK_THROWS_WITH(all_to_all_layout(Tensor::zeros({10}, DType::Float32), Tensor::zeros({10}, DType::Float32), {}, {},
                                      4),
                    Contains("do not split into 4"));
}

TEST_CASE("an uneven all_to_all uses the given counts and checks them", "[nccl]") {
  AllToAllOptions o;
  o.send_counts = {1, 0, 4};
  o.recv_counts = {2, 2, 2};
  Tensor in = Tensor::zeros({5}, DType::Int64), out = Tensor::zeros({6}, DType::Int64);
  AllToAllLayout l = all_to_all_layout(in, out, o.send_counts, o.recv_counts, 3);
  CHECK(l.send_offsets == std::vector<size_t>{0, 1, 1});
  CHECK(l.recv_offsets == std::vector<size_t>{0, 2, 4});
  CHECK(l.send_counts == std::vector<size_t>{1, 0, 4});

  CHECK_THROWS_WITH(all_to_all_layout(in, Tensor::zeros({7}, DType::Int64), o.send_counts, o.recv_counts, 3),
                    Contains("recv counts"));
  CHECK_THROWS_WITH(all_to_all_layout(Tensor::zeros({6}, DType::Int64), out, o.send_counts, o.recv_counts, 3),
                    Contains("send counts"));
  o.recv_counts = {2, 2};
  CHECK_THROWS_WITH(all_to_all_layout(in, out, o.send_counts, o.recv_counts, 3), Contains("one entry per rank"));
  o.recv_counts = {-1, 4, 3};
  CHECK_THROWS_WITH(all_to_all_layout(in, out, o.send_counts, o.recv_counts, 3), Contains("negative"));
}
