// Expressions: muparser with the spec's operators, % as Python's modulo and a natural log.
#include <catch2/catch.hpp>

#include <cmath>
#include <thread>
#include <vector>

#include "distrun/scenario/model/expression.hpp"
#include "distrun/scenario/check/local_ops.hpp"

using namespace distrun::scenario;

static double eval(const std::string& text) {
  const Expression e(text);
  return e.eval(e.bindings());
}

TEST_CASE("operators and functions of the spec", "[expression]") {
  CHECK(eval("1 + 2 * 3 - 4 / 2") == 5);
  CHECK(eval("2 ^ 10") == 1024);
  CHECK(eval("7 % 3") == 1);
  CHECK(eval("-7 % 3") == 2);  // Python's sign convention
  CHECK(eval("3 > 2 ? 10 : 20") == 10);
  CHECK(eval("1 == 2") == 0);
  CHECK(eval("floor(2.7) + abs(-1) + min(3, 4) + max(3, 4)") == 10);
  CHECK(eval("log(exp(2))") == Approx(2));
  CHECK(eval("sqrt(16)") == 4);
}

TEST_CASE("variables are discovered and bound", "[expression]") {
  Expression e("rank * 10 + i + x");
  CHECK(e.variables() == std::vector<std::string>{"i", "rank", "x"});
  CHECK(map_tensor_names(e) == std::vector<std::string>{"x"});
  Bindings b = e.bindings();
  e.bind(b, "rank", 2);
  e.bind(b, "i", 3);
  e.bind(b, "x", 0.5);
  e.bind(b, "unused", 100);
  CHECK(e.eval(b) == 23.5);
  CHECK(e.index("unused") == -1);
  CHECK(e.index("x") == 2);
}

TEST_CASE("one expression evaluates from several threads at once, each with its own values", "[expression]") {
  const Expression e("rank * 1000 + i");
  std::vector<std::thread> threads;
  std::vector<int> wrong(8, 0);
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      Bindings b = e.bindings();
      e.bind(b, "rank", t);
      for (int i = 0; i < 20000; ++i) {
        e.bind(b, "i", i);
        if (e.eval(b) != t * 1000.0 + i) ++wrong[size_t(t)];
      }
    });
  for (auto& th : threads) th.join();
  CHECK(wrong == std::vector<int>(8, 0));
}

TEST_CASE("parse errors give a position", "[expression]") {
  try {
    Expression e("1 +* 2");
    FAIL("no error");
  } catch (const ExpressionError& err) {
    CHECK(err.position == 3);
    CHECK_THAT(err.message, Catch::Contains("*"));
  }
  CHECK_THROWS_AS(Expression("sqrt(1, 2)"), ExpressionError);
  CHECK_THROWS_AS(Expression("(1 + 2"), ExpressionError);
}

TEST_CASE("fills see rank, world size and indices", "[expression]") {
  TensorSpec spec;
  spec.has_shape = true;
  spec.shape = {Number{2}, Number{3}};
  spec.fill.expr = std::make_shared<Expression>("rank*100 + world_size*10 + i*3 + j");
  distrun::Tensor t = make_tensor(spec, distrun::DType::Int32, RankEnv{1, 4, 1, 4}, "t.yaml");
  CHECK(t.shape() == distrun::Shape{2, 3});
  CHECK(t.get(0) == 140);
  CHECK(t.get(5) == 145);
}

TEST_CASE("${expr} substitution in objects", "[expression]") {
  ObjectTemplate t;
  t.value = {{"rank", "${rank}"}, {"tag", "r${rank*2}/${world_size}"}, {"half", "${rank / 2}"}, {"keep", 1}};
  for (const char* e : {"rank", "rank*2", "world_size", "rank / 2"})
    t.exprs.emplace_back(e, std::make_shared<Expression>(e));
  const auto o = substitute_object(t, RankEnv{3, 4, 3, 4});
  CHECK(o["rank"] == 3);
  CHECK(o["rank"].is_number_integer());
  CHECK(o["tag"] == "r6/4");
  CHECK(o["half"] == 1.5);
  CHECK(o["keep"] == 1);
}
