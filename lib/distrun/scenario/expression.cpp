#include "distrun/scenario/expression.hpp"

#include <muParser.h>

#include <cmath>

namespace distrun::scenario {

double floor_mod(double a, double b) { return a - b * std::floor(a / b); }

namespace {
double fn_floor(double v) { return std::floor(v); }
double fn_ln(double v) { return std::log(v); }
}  // namespace

double* Expression::make_slot(const char* name, void* self_ptr) {
  auto* self = static_cast<Expression*>(self_ptr);
  auto it = self->slots_index_.find(name);
  if (it != self->slots_index_.end()) return &self->slots_[it->second];
  self->slots_.push_back(0.0);
  self->slots_index_[name] = self->slots_.size() - 1;
  return &self->slots_.back();
}

Expression::Expression(const std::string& text) : text_(text), parser_(std::make_unique<mu::Parser>()) {
  try {
    // muparser lacks % and its log is version dependent: define both as the spec means them
    // (% as Python's modulo, log as the natural logarithm).
    parser_->DefineOprt("%", floor_mod, mu::prMUL_DIV, mu::oaLEFT, true);
    parser_->DefineFun("floor", fn_floor);
    parser_->DefineFun("log", fn_ln);
    parser_->SetVarFactory(&Expression::make_slot, this);
    parser_->SetExpr(text);
    parser_->Eval();  // muparser parses lazily: force it now so errors surface at load time
  } catch (const mu::Parser::exception_type& e) {
    throw ExpressionError{size_t(std::max(0, int(e.GetPos()))), e.GetMsg()};
  }
}

Expression::~Expression() = default;

std::vector<std::string> Expression::variables() const {
  std::vector<std::string> out;
  for (const auto& kv : slots_index_) out.push_back(kv.first);
  return out;
}

double* Expression::slot(const std::string& name) {
  auto it = slots_index_.find(name);
  return it == slots_index_.end() ? nullptr : &slots_[it->second];
}

double Expression::eval() {
  try {
    return parser_->Eval();
  } catch (const mu::Parser::exception_type& e) {
    throw ExpressionError{size_t(std::max(0, int(e.GetPos()))), e.GetMsg()};
  }
}

}  // namespace distrun::scenario
