#include "distrun/scenario/model/expression.hpp"

#include <muParser.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <set>

namespace distrun::scenario {

double floor_mod(double a, double b) { return a - b * std::floor(a / b); }

namespace {
double fn_floor(double v) { return std::floor(v); }
double fn_ln(double v) { return std::log(v); }

ExpressionError error_of(const mu::Parser::exception_type& e) {
  return ExpressionError{size_t(std::max(0, int(e.GetPos()))), e.GetMsg()};
}

// muparser lacks % and its log is version dependent: define both as the spec means them (% as
// Python's modulo, log as the natural logarithm).
void define_functions(mu::Parser& p) {
  p.DefineOprt("%", floor_mod, mu::prMUL_DIV, mu::oaLEFT, true);
  p.DefineFun("floor", fn_floor);
  p.DefineFun("log", fn_ln);
}

// Collects the names muparser meets while parsing, each given a scratch slot.
struct Discovery {
  std::set<std::string> names;
  std::vector<std::unique_ptr<double>> slots;
  static double* factory(const char* name, void* self) {
    auto* d = static_cast<Discovery*>(self);
    d->names.insert(name);
    d->slots.push_back(std::make_unique<double>(0.0));
    return d->slots.back().get();
  }
};

// Few expressions are live at once (a fill, a map, a shape): a short list, the most recently
// used first, bounded so a long run that makes many expressions does not grow it. Entries are
// shared with the Evaluators that use them, so an eviction never pulls one from under a loop.
constexpr size_t kCacheSize = 32;
thread_local std::vector<std::shared_ptr<Expression::Compiled>> t_cache;

std::atomic<uint64_t> g_next_id{1};
}  // namespace

// One thread's compiled copy of an expression: a parser whose variables live in `slots`.
struct Expression::Compiled {
  uint64_t id = 0;
  std::unique_ptr<mu::Parser> parser;
  std::vector<double> slots;  // sized once, before the parser takes their addresses
};

Expression::Expression(const std::string& text) : text_(text), id_(g_next_id++) {
  Discovery found;
  try {
    mu::Parser p;
    define_functions(p);
    p.SetVarFactory(&Discovery::factory, &found);
    p.SetExpr(text);
    p.Eval();  // muparser parses lazily: force it now so errors surface at load time
  } catch (const mu::Parser::exception_type& e) {
    throw error_of(e);
  }
  variables_.assign(found.names.begin(), found.names.end());
}

int Expression::index(const std::string& name) const {
  auto it = std::lower_bound(variables_.begin(), variables_.end(), name);
  return it != variables_.end() && *it == name ? int(it - variables_.begin()) : -1;
}

Expression::Evaluator Expression::evaluator() const {
  auto it = std::find_if(t_cache.begin(), t_cache.end(), [&](const auto& e) { return e->id == id_; });
  if (it != t_cache.end()) {
    if (it != t_cache.begin()) std::rotate(t_cache.begin(), it, it + 1);
    return Evaluator(t_cache.front());
  }
  auto fresh = std::make_shared<Compiled>();
  fresh->id = id_;
  fresh->slots.assign(variables_.size(), 0.0);
  fresh->parser = std::make_unique<mu::Parser>();
  try {
    define_functions(*fresh->parser);
    for (size_t k = 0; k < variables_.size(); ++k) fresh->parser->DefineVar(variables_[k], &fresh->slots[k]);
    fresh->parser->SetExpr(text_);
  } catch (const mu::Parser::exception_type& e) {
    throw error_of(e);
  }
  if (t_cache.size() >= kCacheSize) t_cache.pop_back();
  t_cache.insert(t_cache.begin(), fresh);
  return Evaluator(fresh);
}

double Expression::eval(const Bindings& values) const {
  Evaluator ev = evaluator();
  ev.set(values);
  return ev.eval();
}

Expression::Evaluator::Evaluator(std::shared_ptr<Compiled> c)
    : compiled_(std::move(c)), slots_(compiled_->slots.data()) {}

void Expression::Evaluator::set(const Bindings& values) {
  std::copy(values.begin(), values.begin() + std::min(values.size(), compiled_->slots.size()), slots_);
}

double Expression::Evaluator::eval() const {
  try {
    return compiled_->parser->Eval();
  } catch (const mu::Parser::exception_type& e) {
    throw error_of(e);
  }
}

}  // namespace distrun::scenario
