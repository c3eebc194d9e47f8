// Every collective's values for world sizes 1 to 8, every dtype, row and column splits,
// uneven all_to_all, subgroups, objects and timeouts, with ranks as threads over a HashStore.
// The thresholds' case also runs as processes on namespace hosts (tests/unit/netns_hosts.py).
#include <catch2/catch.hpp>
#include <cstdlib>
#include <iterator>
#include <mutex>
#include <vector>

#include "distrun/backend/reduce_kernels.hpp"
#include "distrun/comm/collectives.hpp"
#include "distrun/core/error.hpp"
#include "ranks.hpp"

using namespace distrun;
using distrun::testing::near;
using distrun::testing::run_ranks;

namespace {

// Every dtype but bool, whose logical reductions have their own case below.
const DType kAllTypes[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int8,
                           DType::UInt8,   DType::Int16,   DType::Int32,   DType::Int64};

// Rank r's input: element e holds r + e % 3 + 1 (small, exact in every dtype, never zero).
Tensor input(int rank, const Shape& shape, DType dt) {
  Tensor t = Tensor::empty(shape, dt);
  for (int64_t e = 0; e < t.numel(); ++e) t.set(e, rank + e % 3 + 1);
  return t;
}
double in_value(int rank, int64_t e) { return rank + e % 3 + 1; }

// Row-major flat index of (row, col) in a 2-D shape.
int64_t at(const Shape& s, int64_t r, int64_t c) { return r * s[1] + c; }

// As run_ranks, or, under DISTRUN_TEST_WORLD=PATH (netns_hosts.py), as one process of a world
// that meets through the environment: this process runs its own rank, over the path PATH.
void run_world(int n, const std::function<void(ProcessGroup&)>& fn) {
  const char* path = std::getenv("DISTRUN_TEST_WORLD");
  if (!path || !*path) return run_ranks(n, fn);
  const long checks_before = distrun::testing::rank_checks;
  InitOptions o;
  o.timeout = std::chrono::seconds(20);
  auto pg = ProcessGroup::init(o);
  REQUIRE(pg->size() == n);
  REQUIRE(pg->backend().transport_name() == path);
  fn(*pg);
  REQUIRE(distrun::testing::rank_checks > checks_before);
}

}  // namespace

TEST_CASE("all_reduce: every op, every dtype, world sizes 1..8", "[collectives]") {
  for (int n = 1; n <= 8; ++n) {
    run_ranks(n, [&](ProcessGroup& pg) {
      for (DType dt : kAllTypes) {
        for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max, ReduceOp::BAnd,
                            ReduceOp::BOr, ReduceOp::BXor}) {
          if (reduce_op_refusal(op, dt)) continue;
          if (op == ReduceOp::Prod &&
              (dt == DType::Int8 || dt == DType::UInt8 || dt == DType::Int16 || dt == DType::Float16 ||
               dt == DType::BFloat16) &&
              n > 3)
            continue;  // 8! overflows these types; covered at small n
          Tensor t = input(pg.rank(), {7}, dt);
          AllreduceOptions o;
          o.op = op;
          pg.backend().all_reduce(t, o);
          for (int64_t e = 0; e < 7; ++e) {
            double want = in_value(0, e);
            int64_t iwant = int64_t(want);
            for (int r = 1; r < n; ++r) {
              double v = in_value(r, e);
              switch (op) {
                case ReduceOp::Sum:
                case ReduceOp::Avg: want += v; break;
                case ReduceOp::Prod: want *= v; break;
                case ReduceOp::Min: want = std::min(want, v); break;
                case ReduceOp::Max: want = std::max(want, v); break;
                case ReduceOp::BAnd: iwant &= int64_t(v); break;
                case ReduceOp::BOr: iwant |= int64_t(v); break;
                case ReduceOp::BXor: iwant ^= int64_t(v); break;
              }
            }
            if (op == ReduceOp::BAnd || op == ReduceOp::BOr || op == ReduceOp::BXor) want = double(iwant);
            if (op == ReduceOp::Avg) want = is_integer(dt) ? double(int64_t(want) / n) : want / n;
            RANK_REQUIRE_CTX(near(t.get(e), want, dt == DType::BFloat16 ? 1e-2 : 1e-3),
                             "n=" << n << " dtype=" << dtype_name(dt) << " op=" << reduce_op_name(op) << " e=" << e
                                  << " got " << t.get(e) << " want " << want);
          }
        }
      }
    });
  }
}

TEST_CASE("all_reduce of bool is logical: sum and max are or, prod and min are and", "[collectives]") {
  // Element e of rank r holds bit r of e, so the 8 elements of 3 ranks cover every combination.
  run_ranks(3, [&](ProcessGroup& pg) {
    for (ReduceOp op :
         {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max, ReduceOp::BAnd, ReduceOp::BOr, ReduceOp::BXor}) {
      Tensor t = Tensor::empty({8}, DType::Bool);
      for (int64_t e = 0; e < 8; ++e) t.set(e, double((e >> pg.rank()) & 1));
      AllreduceOptions o;
      o.op = op;
      pg.backend().all_reduce(t, o);
      for (int64_t e = 0; e < 8; ++e) {
        const bool any = e != 0, all = e == 7, odd = __builtin_popcountll(uint64_t(e)) % 2 == 1;
        const bool conj = op == ReduceOp::Prod || op == ReduceOp::Min || op == ReduceOp::BAnd;
        const bool want = op == ReduceOp::BXor ? odd : conj ? all : any;
        RANK_REQUIRE_CTX(t.get(e) == double(want), "op=" << reduce_op_name(op) << " e=" << e << " got " << t.get(e));
      }
    }
    RANK_REQUIRE_CTX(reduce_op_refusal(ReduceOp::Avg, DType::Bool).has_value(), "avg of bool is refused");
  });
}

TEST_CASE("broadcast, reduce, gather and scatter from every root", "[collectives]") {
  for (int n : {1, 2, 3, 5, 8}) {
    run_ranks(n, [&](ProcessGroup& pg) {
      Backend& b = pg.backend();
      for (int root = 0; root < n; ++root) {
        Tensor t = input(pg.rank(), {2, 3}, DType::Int32);
        BroadcastOptions bo;
        bo.root = root;
        b.broadcast(t, bo);
        for (int64_t e = 0; e < 6; ++e) RANK_REQUIRE(t.get(e) == in_value(root, e));

        Tensor red = input(pg.rank(), {4}, DType::Float64);
        ReduceOptions ro;
        ro.root = root;
        b.reduce(red, ro);
        if (pg.rank() == root)
          for (int64_t e = 0; e < 4; ++e) {
            double want = 0;
            for (int r = 0; r < n; ++r) want += in_value(r, e);
            RANK_REQUIRE(red.get(e) == want);
          }

        for (int dim : {0, 1}) {
          Tensor mine = input(pg.rank(), {2, 2}, DType::Float32);
          Tensor g = gather(b, mine, root, dim);
          if (pg.rank() == root) {
            Shape want = dim == 0 ? Shape{2 * n, 2} : Shape{2, 2 * n};
            RANK_REQUIRE(g.shape() == want);
            for (int r = 0; r < n; ++r)
              for (int64_t i = 0; i < 2; ++i)
                for (int64_t j = 0; j < 2; ++j) {
                  int64_t gi = dim == 0 ? r * 2 + i : i, gj = dim == 0 ? j : r * 2 + j;
                  RANK_REQUIRE(g.get(at(want, gi, gj)) == in_value(r, i * 2 + j));
                }
          } else {
            RANK_REQUIRE(!g.defined());
          }

          Shape full = dim == 0 ? Shape{2 * n, 3} : Shape{3, 2 * n};
          Tensor src = Tensor::empty(full, DType::Int64);
          for (int64_t e = 0; e < src.numel(); ++e) src.set(e, pg.rank() == root ? double(e) : -1.0);
          Tensor s = scatter(b, src, root, dim);
          Shape part = dim == 0 ? Shape{2, 3} : Shape{3, 2};
          RANK_REQUIRE(s.shape() == part);
          for (int64_t i = 0; i < part[0]; ++i)
            for (int64_t j = 0; j < part[1]; ++j) {
              int64_t fi = dim == 0 ? pg.rank() * 2 + i : i, fj = dim == 0 ? j : pg.rank() * 2 + j;
              RANK_REQUIRE(s.get(at(part, i, j)) == double(at(full, fi, fj)));
            }
        }
      }
    });
  }
}

TEST_CASE("all_gather and reduce_scatter along rows and columns, every dtype", "[collectives]") {
  for (int n : {1, 2, 4, 7}) {
    run_ranks(n, [&](ProcessGroup& pg) {
      Backend& b = pg.backend();
      for (DType dt : kAllTypes) {
        for (int dim : {0, 1}) {
          Tensor mine = input(pg.rank(), {2, 3}, dt);
          Tensor g = all_gather(b, mine, dim);
          Shape gs = dim == 0 ? Shape{2 * n, 3} : Shape{2, 3 * n};
          RANK_REQUIRE(g.shape() == gs);
          for (int r = 0; r < n; ++r)
            for (int64_t i = 0; i < 2; ++i)
              for (int64_t j = 0; j < 3; ++j) {
                int64_t gi = dim == 0 ? r * 2 + i : i, gj = dim == 0 ? j : r * 3 + j;
                RANK_REQUIRE(g.get(at(gs, gi, gj)) == in_value(r, i * 3 + j));
              }

          Shape full = dim == 0 ? Shape{2 * n, 3} : Shape{3, 2 * n};
          Tensor x = input(pg.rank(), full, dt);
          Tensor y = reduce_scatter(b, x, dim, ReduceOp::Sum);
          Shape part = dim == 0 ? Shape{2, 3} : Shape{3, 2};
          RANK_REQUIRE(y.shape() == part);
          for (int64_t i = 0; i < part[0]; ++i)
            for (int64_t j = 0; j < part[1]; ++j) {
              int64_t fi = dim == 0 ? pg.rank() * 2 + i : i, fj = dim == 0 ? j : pg.rank() * 2 + j;
              double want = 0;
              for (int r = 0; r < n; ++r) want += in_value(r, at(full, fi, fj));
              RANK_REQUIRE(near(y.get(at(part, i, j)), want));
            }
        }
      }
    });
  }
}

// The tests above move a few bytes; these cross where the algorithms change (64 KiB per rank:
// the small all_reduce fold, the ring on TCP) and where TCP cuts pieces into 1 MiB segments,
// with counts that do not divide among the ranks.
TEST_CASE("large buffers: all_reduce, all_gather, reduce_scatter, broadcast, reduce, all_to_all past 64 KiB and 1 MiB",
          "[collectives][large]") {
  for (int n : {2, 3, 4}) {
    run_ranks(n, [&](ProcessGroup& pg) {
      Backend& b = pg.backend();
      const int me = pg.rank();
      for (int64_t count : {int64_t(16385), int64_t(300001)}) {
        Tensor t = input(me, {count}, DType::Float32);
        b.all_reduce(t, AllreduceOptions{});
        for (int64_t e = 0; e < count; ++e) {
          double want = 0;
          for (int r = 0; r < n; ++r) want += in_value(r, e);
          RANK_REQUIRE_CTX(t.get(e) == want, "all_reduce n=" << n << " count=" << count << " e=" << e);
        }

        Tensor g = all_gather(b, input(me, {count}, DType::Float32), 0);
        for (int r = 0; r < n; ++r)
          for (int64_t e = 0; e < count; e += 7)
            RANK_REQUIRE_CTX(g.get(r * count + e) == in_value(r, e), "all_gather n=" << n << " count=" << count);

        Tensor x = input(me, {count * n}, DType::Float32);
        Tensor y = reduce_scatter(b, x, 0, ReduceOp::Sum);
        for (int64_t e = 0; e < count; ++e) {
          double want = 0;
          for (int r = 0; r < n; ++r) want += in_value(r, me * count + e);
          RANK_REQUIRE_CTX(y.get(e) == want, "reduce_scatter n=" << n << " count=" << count << " e=" << e);
        }

        Tensor c = input(me, {count}, DType::Float32);
        BroadcastOptions bo;
        bo.root = n - 1;
        b.broadcast(c, bo);
        for (int64_t e = 0; e < count; e += 7) RANK_REQUIRE(c.get(e) == in_value(n - 1, e));

        Tensor red = input(me, {count}, DType::Float32);
        ReduceOptions ro;
        ro.root = 1;
        b.reduce(red, ro);
        if (me == 1)
          for (int64_t e = 0; e < count; e += 7) {
            double want = 0;
            for (int r = 0; r < n; ++r) want += in_value(r, e);
            RANK_REQUIRE(red.get(e) == want);
          }

        Tensor a = Tensor::empty({n, count}, DType::Float32);
        for (int64_t e = 0; e < a.numel(); ++e) a.set(e, double(1000 * me + e % 997));
        Tensor z = all_to_all(b, a, 0);
        for (int src = 0; src < n; ++src)
          for (int64_t e = 0; e < count; e += 7)
            RANK_REQUIRE(z.get(src * count + e) == double(1000 * src + (me * count + e) % 997));
      }
    });
  }
}

namespace {

// Every collective in each of `dtypes` at one element either side of each of `thresholds`
// (bytes): each count is that many bytes of the dtype, and one element less and more; per
// rank's block for all_gather, reduce_scatter, gather, scatter and all_to_all, whole for the
// others. Three ranks.
void at_thresholds(const std::vector<int64_t>& thresholds, const std::vector<DType>& dtypes) {
  const int n = 3;
  run_world(n, [&](ProcessGroup& pg) {
    Backend& b = pg.backend();
    const int me = pg.rank();
    auto sum_of = [&](int64_t e) {
      double want = 0;
      for (int r = 0; r < n; ++r) want += in_value(r, e);
      return want;
    };
    for (DType dt : dtypes) {
      const int64_t es = int64_t(dtype_size(dt));
      for (int64_t threshold : thresholds)
        for (int64_t count : {threshold / es - 1, threshold / es, threshold / es + 1}) {
          const std::string at = std::string(dtype_name(dt)) + " count " + std::to_string(count);
          Tensor t = input(me, {count}, dt);
          b.all_reduce(t, AllreduceOptions{});
          for (int64_t e = 0; e < count; ++e)
            RANK_REQUIRE_CTX(t.get(e) == sum_of(e), "all_reduce " << at << " e " << e);

          Tensor g = all_gather(b, input(me, {count}, dt), 0);
          for (int r = 0; r < n; ++r)
            for (int64_t e = 0; e < count; ++e)
              RANK_REQUIRE_CTX(g.get(r * count + e) == in_value(r, e), "all_gather " << at << " e " << e);

          Tensor y = reduce_scatter(b, input(me, {count * n}, dt), 0, ReduceOp::Sum);
          for (int64_t e = 0; e < count; ++e)
            RANK_REQUIRE_CTX(y.get(e) == sum_of(me * count + e), "reduce_scatter " << at << " e " << e);

          Tensor c = input(me, {count}, dt);
          BroadcastOptions bo;
          bo.root = 1;
          b.broadcast(c, bo);
          for (int64_t e = 0; e < count; ++e) RANK_REQUIRE_CTX(c.get(e) == in_value(1, e), "broadcast " << at);

          Tensor red = input(me, {count}, dt);
          ReduceOptions ro;
          ro.root = 2;
          b.reduce(red, ro);
          if (me == 2)
            for (int64_t e = 0; e < count; ++e) RANK_REQUIRE_CTX(red.get(e) == sum_of(e), "reduce " << at);

          Tensor gathered = Tensor::empty({count * n}, dt);
          GatherOptions go;
          go.root = 0;
          b.gather(input(me, {count}, dt), gathered, go);
          if (me == 0)
            for (int r = 0; r < n; ++r)
              for (int64_t e = 0; e < count; ++e)
                RANK_REQUIRE_CTX(gathered.get(r * count + e) == in_value(r, e), "gather " << at);

          Tensor part = Tensor::empty({count}, dt);
          ScatterOptions so;
          so.root = 0;
          b.scatter(input(me, {count * n}, dt), part, so);
          for (int64_t e = 0; e < count; ++e)
            RANK_REQUIRE_CTX(part.get(e) == in_value(0, me * count + e), "scatter " << at);

          Tensor z = all_to_all(b, input(me, {count * n}, dt), 0);
          for (int src = 0; src < n; ++src)
            for (int64_t e = 0; e < count; ++e)
              RANK_REQUIRE_CTX(z.get(src * count + e) == in_value(src, me * count + e), "all_to_all " << at);
        }
    }
  });
}

}  // namespace

TEST_CASE("every collective and dtype at one element either side of each size threshold", "[thresholds]") {
  // 64 KiB per rank: the shared segment's inline slot; on TCP (3 ranks) the switch from the
  // hub to the ring, the most a buffer sent with its intent holds and a
  // piece's part folded at once. 1 MiB: a piece's segment on Gloo's pairs (DISTRUN_TCP=gloo).
  at_thresholds({int64_t(64) << 10, int64_t(1) << 20}, {std::begin(kAllTypes), std::end(kAllTypes)});
}

TEST_CASE("every collective at one element either side of a segment, a dtype of each size", "[.segment]") {
  // Hidden: run by name over Gloo's pairs, whose pieces go in segments of 1 MiB (paths/tcp_path).
  // Where a segment ends depends on the element's size, not on its type: one of each size.
  at_thresholds({int64_t(1) << 20}, {DType::Int8, DType::Float16, DType::Float32, DType::Float64});
}

TEST_CASE("all_to_all: even and uneven, rows and columns", "[collectives]") {
  for (int n : {1, 2, 3, 4}) {
    run_ranks(n, [&](ProcessGroup& pg) {
      Backend& b = pg.backend();
      const int me = pg.rank();
      // Even, rows: element (i, j) of rank r's input = 100 r + 10 i + j.
      for (int dim : {0, 1}) {
        Shape s = dim == 0 ? Shape{n, 2} : Shape{2, n};
        Tensor x = Tensor::empty(s, DType::Int32);
        for (int64_t i = 0; i < s[0]; ++i)
          for (int64_t j = 0; j < s[1]; ++j) x.set(at(s, i, j), 100 * me + 10 * i + j);
        Tensor y = all_to_all(b, x, dim);
        RANK_REQUIRE(y.shape() == s);
        for (int src = 0; src < n; ++src) {
          // Row/column `me` of rank src's input arrives as row/column src.
          for (int64_t k = 0; k < 2; ++k) {
            int64_t yi = dim == 0 ? src : k, yj = dim == 0 ? k : src;
            int64_t xi = dim == 0 ? me : k, xj = dim == 0 ? k : me;
            RANK_REQUIRE(y.get(at(s, yi, yj)) == 100 * src + 10 * xi + xj);
          }
        }
      }
      // Uneven: rank r sends (j + r) % 2 + 1 rows to rank j.
      std::vector<int64_t> split;
      int64_t rows = 0;
      for (int j = 0; j < n; ++j) {
        split.push_back((j + me) % 2 + 1);
        rows += split.back();
      }
      for (int dim : {0, 1}) {
        Shape s = dim == 0 ? Shape{rows, 3} : Shape{3, rows};
        Tensor x = Tensor::empty(s, DType::Float32);
        for (int64_t e = 0; e < x.numel(); ++e) x.set(e, 1000 * me + e);
        Tensor y = all_to_all(b, x, dim, split);
        auto split_of = [&](int src, int j) { return int64_t((j + src) % 2 + 1); };
        int64_t recv_off = 0;
        for (int src = 0; src < n; ++src) {
          int64_t rows_src = 0, send_off = 0;
          for (int j = 0; j < n; ++j) rows_src += split_of(src, j);
          for (int j = 0; j < me; ++j) send_off += split_of(src, j);
          for (int64_t k = 0; k < split_of(src, me); ++k)
            for (int64_t c = 0; c < 3; ++c) {
              double want = dim == 0 ? 1000 * src + (send_off + k) * 3 + c : 1000 * src + c * rows_src + send_off + k;
              int64_t got_at = dim == 0 ? at(y.shape(), recv_off + k, c) : at(y.shape(), c, recv_off + k);
              RANK_REQUIRE(y.get(got_at) == want);
            }
          recv_off += split_of(src, me);
        }
        RANK_REQUIRE(y.shape()[size_t(dim)] == recv_off);
      }
    });
  }
}

TEST_CASE("all_to_all: a rank that sends nothing still receives whole rows", "[collectives]") {
  // torch's all_to_all_single with split_sizes [2 rank, 0]: rank 0's input is empty along dim,
  // yet it receives rank 1's two rows (or columns) of 3.
  run_ranks(2, [&](ProcessGroup& pg) {
    Backend& b = pg.backend();
    const int me = pg.rank();
    for (int dim : {0, 1}) {
      Shape s = dim == 0 ? Shape{2 * me, 3} : Shape{3, 2 * me};
      Tensor x = Tensor::empty(s, DType::Float32);
      for (int64_t e = 0; e < x.numel(); ++e) x.set(e, 100 + e);
      Tensor y = all_to_all(b, x, dim, {2 * me, 0});
      const Shape want = me == 0 ? (dim == 0 ? Shape{2, 3} : Shape{3, 2}) : (dim == 0 ? Shape{0, 3} : Shape{3, 0});
      RANK_REQUIRE(y.shape() == want);
      for (int64_t e = 0; e < y.numel(); ++e) RANK_REQUIRE(y.get(e) == 100 + e);
    }
  });
}

TEST_CASE("send/recv and isend/irecv pass a chain of ranks", "[collectives]") {
  run_ranks(4, [&](ProcessGroup& pg) {
    Backend& b = pg.backend();
    Tensor t = Tensor::zeros({3}, DType::Float32);
    if (pg.rank() == 0) {
      for (int64_t e = 0; e < 3; ++e) t.set(e, 7 + e);
      b.send(t, 1, {});
    } else {
      b.recv(t, pg.rank() - 1, {});
      for (int64_t e = 0; e < 3; ++e) t.set(e, t.get(e) + 1);
      if (pg.rank() + 1 < 4) b.isend(t, pg.rank() + 1, {})->wait();
    }
    if (pg.rank() == 3)
      for (int64_t e = 0; e < 3; ++e) RANK_REQUIRE(t.get(e) == 7 + e + 3);
    Tensor a = Tensor::zeros({1}, DType::Int64);
    auto w = pg.rank() % 2 == 0 ? b.isend(input(pg.rank(), {1}, DType::Int64), pg.rank() + 1, {})
                                : b.irecv(a, pg.rank() - 1, {});
    w->wait();
    RANK_REQUIRE(w->is_completed());
    if (pg.rank() % 2 == 1) RANK_REQUIRE(a.get(0) == in_value(pg.rank() - 1, 0));
  });
}

TEST_CASE("subgroups: halves reduce separately, non-members get nothing", "[collectives]") {
  run_ranks(4, [&](ProcessGroup& pg) {
    auto low = pg.backend().new_group({0, 1});
    auto high = pg.backend().new_group({2, 3});
    auto mine = pg.rank() < 2 ? low : high;
    RANK_REQUIRE(mine);
    RANK_REQUIRE((pg.rank() < 2 ? high : low) == nullptr);
    RANK_REQUIRE(mine->size() == 2);
    RANK_REQUIRE(mine->global_rank(mine->rank()) == pg.rank());
    Tensor t = Tensor::empty({1}, DType::Float32);
    t.set(0, pg.rank());
    mine->all_reduce(t, {});
    RANK_REQUIRE(t.get(0) == (pg.rank() < 2 ? 1 : 5));
    BroadcastOptions bo;
    bo.root = mine->group_rank(pg.rank() < 2 ? 1 : 3);
    mine->broadcast(t, bo);
  });
}

TEST_CASE("object collectives carry JSON values", "[collectives]") {
  run_ranks(3, [&](ProcessGroup& pg) {
    nlohmann::ordered_json mine = {{"rank", pg.rank()},
                                   {"value", pg.rank() * 10},
                                   {"s", std::string(pg.rank() * 5, 'x')}};
    auto all = all_gather_object(pg.backend(), mine);
    RANK_REQUIRE(all.size() == 3);
    for (int r = 0; r < 3; ++r) RANK_REQUIRE(all[size_t(r)]["value"] == r * 10);
    auto g = gather_object(pg.backend(), mine, 1);
    RANK_REQUIRE(g.size() == (pg.rank() == 1 ? 3u : 0u));
    auto b = broadcast_object(pg.backend(),
                              pg.rank() == 2 ? nlohmann::ordered_json("from two") : nlohmann::ordered_json(nullptr), 2);
    RANK_REQUIRE(b == "from two");
  });
}

TEST_CASE("coalesced all_reduce packs many tensors into buckets", "[collectives]") {
  run_ranks(3, [&](ProcessGroup& pg) {
    std::vector<Tensor> params;
    for (int k = 0; k < 5; ++k) params.push_back(input(pg.rank(), {k + 1, 3}, DType::Float32));
    AllreduceCoalescedOptions o;
    o.op = ReduceOp::Avg;
    o.bucket_bytes = 64;  // several buckets
    pg.backend().all_reduce_coalesced(params, o);
    for (auto& p : params)
      for (int64_t e = 0; e < p.numel(); ++e)
        RANK_REQUIRE(near(p.get(e), (in_value(0, e) + in_value(1, e) + in_value(2, e)) / 3));
  });
}

TEST_CASE("a missing peer becomes a timeout error, not a hang", "[collectives]") {
  // Rank 1 never calls the collective: rank 0 must fail within its timeout.
  std::mutex mu;
  std::string error;
  REQUIRE_THROWS([&] {
    run_ranks(
        2,
        [&](ProcessGroup& pg) {
          if (pg.rank() == 1) return;
          Tensor t = Tensor::zeros({4}, DType::Float32);
          AllreduceOptions o;
          o.timeout = std::chrono::milliseconds(300);
          try {
            pg.backend().all_reduce(t, o);
          } catch (const Error& e) {
            std::lock_guard<std::mutex> lock(mu);
            error = e.what();
            throw;
          }
        },
        std::chrono::milliseconds(5000));
  }());
  CHECK_THAT(error, Catch::Contains("rank 0: all_reduce failed"));
}

TEST_CASE("invalid requests are clear errors", "[collectives]") {
  run_ranks(2, [&](ProcessGroup& pg) {
    Tensor f = Tensor::zeros({2}, DType::Float32);
    AllreduceOptions o;
    o.op = ReduceOp::BXor;
    using distrun::testing::throws;
    RANK_REQUIRE(throws<BackendError>([&] {
                   pg.backend().all_reduce(f, o);
                 }).find("needs an integer or bool dtype, not float32") != std::string::npos);
    RANK_REQUIRE(throws<BackendError>([&] {
                   scatter(pg.backend(), Tensor::zeros({3}, DType::Float32), 0, 0);
                 }).find("does not split") != std::string::npos);
    throws<BackendError>([&] { pg.backend().send(f, pg.rank(), {}); });
  });
}
