// Arithmetic expressions of scenario files (fills, shapes, map, ${...}), compiled once with
// muparser. Variables are discovered while parsing, so callers learn which names an
// expression uses (rank, i, a tensor name, ...) and bind only those.
//
// An Expression is immutable once made: evaluation takes the variables' values as Bindings
// instead of writing them into it, so a loaded scenario is const and may be evaluated from
// several threads at once. muparser's parsers are not thread-safe (even Eval writes their
// stack), so each thread evaluates on its own compiled copy, kept in a small per-thread cache.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace distrun::scenario {

/// A parse error: the 0-based character position in the expression and muparser's message.
struct ExpressionError {
  size_t position;
  std::string message;
};

/// The values of an expression's variables for one evaluation, in the order of
/// Expression::variables() (Expression::bindings() makes one of the right size).
using Bindings = std::vector<double>;

class Expression {
 public:
  /// Parses `text`; throws ExpressionError when it is not a valid expression.
  explicit Expression(const std::string& text);
  Expression(const Expression&) = delete;
  Expression& operator=(const Expression&) = delete;

  const std::string& text() const { return text_; }
  /// Every variable name the expression uses, sorted.
  const std::vector<std::string>& variables() const { return variables_; }
  bool uses(const std::string& name) const { return index(name) >= 0; }
  /// The position of `name` in variables() (and in a Bindings), or -1 when unused.
  int index(const std::string& name) const;
  /// Zeroed values for every variable.
  Bindings bindings() const { return Bindings(variables_.size(), 0.0); }
  /// Sets `name` in `b` when the expression uses it (a no-op otherwise).
  void bind(Bindings& b, const std::string& name, double value) const {
    if (const int k = index(name); k >= 0) b[size_t(k)] = value;
  }
  /// Evaluates with `values` (one per variable). Const and thread-safe.
  double eval(const Bindings& values) const;

  struct Compiled;
  /// This thread's compiled copy, for a loop of evaluations (a fill, a map) without a lookup
  /// per element: set values by index, then eval(). Use it on the thread that made it.
  class Evaluator {
   public:
    explicit Evaluator(std::shared_ptr<Compiled> c);
    void set(int index, double value) {
      if (index >= 0) slots_[index] = value;
    }
    void set(const Bindings& values);
    double eval() const;

   private:
    std::shared_ptr<Compiled> compiled_;
    double* slots_;
  };
  Evaluator evaluator() const;

 private:
  std::string text_;
  std::vector<std::string> variables_;  // sorted
  uint64_t id_;                         // names this expression in the per-thread caches
};

/// Python-style modulo (the sign of the divisor), what `%` means in expressions.
double floor_mod(double a, double b);

}  // namespace distrun::scenario
