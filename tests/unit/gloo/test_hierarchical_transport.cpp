// Groups of one job that take different paths: ranks as threads told they sit on different
// "hosts" (GlooBackendOptions::host_id, as DISTRUN_HOST_ID would), so that a group within a
// host takes shared memory, one across hosts with one rank each takes TCP, and one across
// hosts with several ranks each takes the hierarchical path; every collective runs on each
// and its values are checked.
#include <catch2/catch.hpp>

#include <functional>
#include <thread>

#include "distrun/gloo/gloo_backend.hpp"
#include "distrun/store/hash_store.hpp"
#include "ranks.hpp"

using namespace distrun;

namespace {

Tensor filled(int64_t n, DType dt, const std::function<double(int64_t)>& value) {
  Tensor t = Tensor::zeros({n}, dt);
  for (int64_t e = 0; e < n; ++e) t.set(e, value(e));
  return t;
}

// Every collective of the Backend interface on `b`, with values every rank can predict.
void every_collective(Backend& b) {
  const int n = b.size(), r = b.rank();
  const std::string ctx = "group of " + std::to_string(n) + " on " + b.transport_name() + ", rank " + std::to_string(r);
  // all_reduce: sizes below, at and past the ranks per host, uneven ones, and one beyond the
  // inline slots (single-copy reads within a host), and one the hierarchical path cuts into
  // pieces it pipelines.
  for (int64_t count : {1, 3, 4, 1001, 40000, 1100003}) {
    Tensor t = filled(count, DType::Float32, [&](int64_t e) { return (r + 1) * (e % 5 + 1); });
    b.all_reduce(t, {});
    for (int64_t e = 0; e < count; e += 1 + count / 50)
      RANK_REQUIRE_CTX(t.get(e) == n * (n + 1) / 2 * (e % 5 + 1), ctx << " all_reduce count " << count << " e " << e);
  }
  {
    AllreduceOptions mx;
    mx.op = ReduceOp::Max;
    Tensor t = filled(9, DType::Int32, [&](int64_t e) { return (r * 7 + e * 3) % 11; });
    b.all_reduce(t, mx);
    for (int64_t e = 0; e < 9; ++e) {
      int64_t want = 0;
      for (int q = 0; q < n; ++q) want = std::max<int64_t>(want, (q * 7 + e * 3) % 11);
      RANK_REQUIRE_CTX(t.get(e) == double(want), ctx << " all_reduce max e " << e);
    }
    AllreduceOptions avg;
    avg.op = ReduceOp::Avg;
    Tensor a = filled(6, DType::Float64, [&](int64_t e) { return r + e; });
    b.all_reduce(a, avg);
    RANK_REQUIRE_CTX(distrun::testing::near(a.get(5), (n - 1) / 2.0 + 5), ctx << " all_reduce avg");
  }
  {
    BroadcastOptions o;
    o.root = n - 1;
    Tensor t = filled(5, DType::Int64, [&](int64_t e) { return r == n - 1 ? 10 * r + e : -1; });
    b.broadcast(t, o);
    RANK_REQUIRE_CTX(t.get(4) == 10 * (n - 1) + 4, ctx << " broadcast");
  }
  {
    ReduceOptions o;
    Tensor t = filled(3, DType::Int32, [&](int64_t e) { return r + e; });
    b.reduce(t, o);
    if (r == 0) RANK_REQUIRE_CTX(t.get(2) == n * (n - 1) / 2 + 2 * n, ctx << " reduce");
  }
  {
    Tensor in = filled(5, DType::Int32, [&](int64_t e) { return r * 100 + e; });
    Tensor out = Tensor::zeros({5 * n}, DType::Int32);
    b.all_gather(in, out, {});
    for (int q = 0; q < n; ++q) RANK_REQUIRE_CTX(out.get(q * 5 + 4) == q * 100 + 4, ctx << " all_gather block " << q);
    GatherOptions go;
    go.root = 1 % n;
    Tensor gout = Tensor::zeros({5 * n}, DType::Int32);
    b.gather(in, gout, go);
    if (r == go.root)
      for (int q = 0; q < n; ++q) RANK_REQUIRE_CTX(gout.get(q * 5 + 1) == q * 100 + 1, ctx << " gather block " << q);
    ScatterOptions so;
    Tensor sin = filled(3 * n, DType::Int32, [&](int64_t e) { return r == 0 ? e : -1; });
    Tensor sout = Tensor::zeros({3}, DType::Int32);
    b.scatter(sin, sout, so);
    RANK_REQUIRE_CTX(sout.get(2) == 3 * r + 2, ctx << " scatter");
  }
  {
    Tensor in = filled(3 * n, DType::Float32, [&](int64_t e) { return r + e; });
    Tensor out = Tensor::zeros({3}, DType::Float32);
    b.reduce_scatter(in, out, {});
    for (int64_t e = 0; e < 3; ++e)
      RANK_REQUIRE_CTX(out.get(e) == n * (n - 1) / 2 + n * (3 * r + e), ctx << " reduce_scatter e " << e);
  }
  {
    Tensor in = filled(2 * n, DType::Int32, [&](int64_t e) { return r * 1000 + (e / 2) * 10 + e % 2; });
    Tensor out = Tensor::zeros({2 * n}, DType::Int32);
    b.all_to_all(in, out, {});
    for (int q = 0; q < n; ++q)
      RANK_REQUIRE_CTX(out.get(2 * q + 1) == q * 1000 + r * 10 + 1, ctx << " all_to_all from " << q);
  }
  if (n > 1) {
    Tensor s = filled(4, DType::Float32, [&](int64_t e) { return r * 10 + e; });
    Tensor got = Tensor::zeros({4}, DType::Float32);
    auto ws = b.isend(s, (r + 1) % n, {});
    auto wr = b.irecv(got, (r + n - 1) % n, {});
    ws->wait();
    wr->wait();
    RANK_REQUIRE_CTX(got.get(3) == ((r + n - 1) % n) * 10 + 3, ctx << " send/recv");
  }
  b.barrier({});
}

// Runs fn(world) on `hosts.size()` thread ranks, rank r on host hosts[r].
void on_hosts(const std::vector<std::string>& hosts, Hierarchy hierarchy, const std::function<void(GlooBackend&)>& fn) {
  auto store = std::make_shared<HashStore>();
  const int n = int(hosts.size());
  std::vector<std::thread> threads;
  std::exception_ptr first;
  std::mutex mu;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        GlooBackendOptions o;
        o.timeout = std::chrono::seconds(20);
        o.host_id = hosts[size_t(r)];
        o.hierarchy = hierarchy;
        GlooBackend b(store, r, n, o);
        fn(b);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!first) first = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

void require_path(const Backend* g, const std::string& want) {
  if (g) RANK_REQUIRE_CTX(g->transport_name() == want, "path " << g->transport_name() << ", expected " << want);
}

}  // namespace

TEST_CASE(
    "mixed groups: shared memory within a host and TCP across hosts and hierarchical across hosts of 2 ranks "
    "with every collective on each",
    "[mixed]") {
  const long before = distrun::testing::rank_checks;
  on_hosts({"hostA", "hostA", "hostB", "hostB"}, Hierarchy::Auto, [](GlooBackend& world) {
    require_path(&world, "hierarchical(shm x2, tcp x2)");
    every_collective(world);
    // A disagreement is the same typed error on every rank, wherever it comes from, and the
    // group still works after it: sizes differing on one host only, then another collective.
    const int r = world.rank();
    int mismatches = 0;
    // The broadcast is over 512 B, so that it meets: a disagreement on an eager one leaves the
    // group broken (docs/performance.md, "The eager broadcast").
    for (int which = 0; which < 2; ++which) {
      Tensor t = Tensor::zeros({r == 3 && which == 0 ? 8 : 200}, DType::Float32);
      try {
        (r == 3 && which == 1) ? world.broadcast(t, {}) : world.all_reduce(t, {});
      } catch (const CollectiveMismatchError&) {
        ++mismatches;
      }
    }
    RANK_REQUIRE_CTX(mismatches == 2, "rank " << r << " saw " << mismatches << " of 2 mismatches");
    every_collective(world);
    // Every rank makes every group (members get one, the others nullptr), in the same order.
    auto a = world.new_group({0, 1}), b = world.new_group({2, 3}), across = world.new_group({1, 2}),
         uneven = world.new_group({0, 1, 2});
    require_path(a.get(), "shm");
    require_path(b.get(), "shm");
    require_path(across.get(), "tcp");
    require_path(uneven.get(), "tcp");  // 2 ranks on one host, 1 on the other: no even slices
    for (auto* g : {a.get(), b.get(), across.get(), uneven.get()})
      if (g) every_collective(*g);
  });
  CHECK(distrun::testing::rank_checks > before);
}

TEST_CASE("hierarchical path over 3 hosts of 2 ranks interleaved and DISTRUN_HIERARCHY=flat forcing TCP", "[mixed]") {
  const long before = distrun::testing::rank_checks;
  on_hosts({"h0", "h1", "h2", "h0", "h1", "h2"}, Hierarchy::Auto, [](GlooBackend& world) {
    require_path(&world, "hierarchical(shm x2, tcp x3)");
    every_collective(world);
  });
  on_hosts({"hostA", "hostA", "hostB", "hostB"}, Hierarchy::Flat, [](GlooBackend& world) {
    require_path(&world, "tcp");
    every_collective(world);
  });
  CHECK(distrun::testing::rank_checks > before);
}

namespace {

// all_gather, reduce_scatter and broadcast from every root, every element checked: the
// hierarchical path regroups blocks by host and place, so a wrong permutation shows here.
void regrouped_collectives(Backend& b) {
  const int n = b.size(), r = b.rank();
  const std::string ctx = b.transport_name() + ", rank " + std::to_string(r);
  for (int64_t count : {1, 7, 40000}) {
    Tensor in = filled(count, DType::Int64, [&](int64_t e) { return r * 1000000 + e; });
    Tensor out = Tensor::zeros({count * n}, DType::Int64);
    b.all_gather(in, out, {});
    for (int q = 0; q < n; ++q)
      for (int64_t e = 0; e < count; ++e)
        if (out.get(q * count + e) != double(q * 1000000 + e))
          RANK_REQUIRE_CTX(false, ctx << " all_gather count " << count << " block " << q << " e " << e << ": "
                                      << out.get(q * count + e));
    Tensor rin = filled(count * n, DType::Int64, [&](int64_t e) { return (r + 1) * (e + 1); });
    Tensor rout = Tensor::zeros({count}, DType::Int64);
    b.reduce_scatter(rin, rout, {});
    for (int64_t e = 0; e < count; ++e)
      if (rout.get(e) != double(n * (n + 1) / 2 * (r * count + e + 1)))
        RANK_REQUIRE_CTX(false, ctx << " reduce_scatter count " << count << " e " << e << ": " << rout.get(e));
    for (int root = 0; root < n; ++root) {
      BroadcastOptions o;
      o.root = root;
      Tensor t = filled(count, DType::Int64, [&](int64_t e) { return r == root ? root * 1000000 + e : -1; });
      b.broadcast(t, o);
      for (int64_t e = 0; e < count; ++e)
        if (t.get(e) != double(root * 1000000 + e))
          RANK_REQUIRE_CTX(false, ctx << " broadcast from " << root << " count " << count << " e " << e);
    }
  }
  RANK_REQUIRE_CTX(true, ctx << " regrouped collectives");
}

}  // namespace

TEST_CASE(
    "hierarchical all_gather, reduce_scatter and broadcast from every root put every element where the flat "
    "path does, hosts contiguous or interleaved",
    "[mixed]") {
  const long before = distrun::testing::rank_checks;
  on_hosts({"hostA", "hostA", "hostB", "hostB"}, Hierarchy::Auto, [](GlooBackend& world) {
    require_path(&world, "hierarchical(shm x2, tcp x2)");
    regrouped_collectives(world);
    // A disagreement in a regrouped collective is the same typed error on every rank.
    const int r = world.rank();
    int mismatches = 0;
    Tensor in = Tensor::zeros({r == 2 ? 3 : 4}, DType::Float32), out = Tensor::zeros({in.numel() * 4}, DType::Float32);
    try {
      world.all_gather(in, out, {});
    } catch (const CollectiveMismatchError&) {
      ++mismatches;
    }
    RANK_REQUIRE_CTX(mismatches == 1, "rank " << r << ": all_gather with rank 2 short is a mismatch everywhere");
    regrouped_collectives(world);
  });
  on_hosts({"h0", "h1", "h2", "h0", "h1", "h2"}, Hierarchy::Auto, [](GlooBackend& world) {
    require_path(&world, "hierarchical(shm x2, tcp x3)");
    regrouped_collectives(world);
  });
  CHECK(distrun::testing::rank_checks > before);
}

TEST_CASE("DISTRUN_ALGO picks the algorithm family; a bad value or the retired DISTRUN_ALLREDUCE_ALGO is a ConfigError",
          "[paths]") {
  // Set here and put back: other cases in this process read the environment too.
  struct Restore {
    std::string algo = std::getenv("DISTRUN_ALGO") ? std::getenv("DISTRUN_ALGO") : "";
    ~Restore() {
      unsetenv("DISTRUN_ALLREDUCE_ALGO");
      if (algo.empty())
        unsetenv("DISTRUN_ALGO");
      else
        setenv("DISTRUN_ALGO", algo.c_str(), 1);
    }
  } restore;
  GlooBackendOptions o;
  for (auto [value, want] : {std::pair{"ring", Algorithm::Ring},
                             {"direct", Algorithm::Direct},
                             {"auto", Algorithm::Auto},
                             {"", Algorithm::Auto}}) {
    setenv("DISTRUN_ALGO", value, 1);
    o.read_env();
    CHECK(o.algorithm == want);
  }
  setenv("DISTRUN_ALGO", "gloo", 1);
  CHECK_THROWS_AS(o.read_env(), ConfigError);
  unsetenv("DISTRUN_ALGO");
  setenv("DISTRUN_ALLREDUCE_ALGO", "ring", 1);
  CHECK_THROWS_WITH(o.read_env(), Catch::Matchers::Contains("DISTRUN_ALGO=auto|direct|ring"));
}
