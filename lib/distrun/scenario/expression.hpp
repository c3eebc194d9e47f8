// Arithmetic expressions of scenario files (fills, shapes, map, ${...}), compiled once with
// muparser. Variables are discovered while parsing, so callers learn which names an
// expression uses (rank, i, a tensor name, ...) and bind only those.
// Not thread-safe: one Expression per use, as muparser parsers are not.
#pragma once
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace mu {
class Parser;
}

namespace distrun::scenario {

/// A parse error: the 0-based character position in the expression and muparser's message.
struct ExpressionError {
  size_t position;
  std::string message;
};

class Expression {
 public:
  /// Parses `text`; throws ExpressionError when it is not a valid expression.
  explicit Expression(const std::string& text);
  ~Expression();
  Expression(const Expression&) = delete;
  Expression& operator=(const Expression&) = delete;

  const std::string& text() const { return text_; }
  /// Every variable name the expression uses, sorted.
  std::vector<std::string> variables() const;
  bool uses(const std::string& name) const { return slots_index_.count(name) != 0; }
  /// Where to write variable `name` before eval(); nullptr when the expression does not use it.
  double* slot(const std::string& name);
  /// Sets `name` when used (a no-op otherwise).
  void set(const std::string& name, double value) {
    if (double* p = slot(name)) *p = value;
  }
  /// Evaluates with the current variable values.
  double eval();

 private:
  static double* make_slot(const char* name, void* self);
  std::string text_;
  std::unique_ptr<mu::Parser> parser_;
  std::deque<double> slots_;               // stable addresses for muparser
  std::map<std::string, size_t> slots_index_;
};

/// Python-style modulo (the sign of the divisor), what `%` means in expressions.
double floor_mod(double a, double b);

}  // namespace distrun::scenario
