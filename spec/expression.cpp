#include "spec/expression.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <muParser.h>

#include <cmath>
#include <limits>

#include "base/error.hpp"

namespace ktune::spec {
namespace {

double remainder_of(double a, double b) { return b == 0 ? std::numeric_limits<double>::quiet_NaN() : std::fmod(a, b); }
double floor_of(double a) { return std::floor(a); }
double ceil_of(double a) { return std::ceil(a); }
double ceil_div(double a, double b) { return b == 0 ? std::numeric_limits<double>::quiet_NaN() : std::ceil(a / b); }
double floor_div(double a, double b) { return b == 0 ? std::numeric_limits<double>::quiet_NaN() : std::floor(a / b); }

}  // namespace

struct Expression::Parser {
  mu::Parser parser;
  std::vector<double> slots;  // one per name, in names_ order; the parser reads them by address
};

Expression::Expression(std::string text, std::string what, const std::vector<std::string>& names)
    : text_(std::move(text)), what_(std::move(what)), names_(names), parser_(std::make_unique<Parser>()) {
  auto& p = parser_->parser;
  parser_->slots.assign(names_.size(), 0.0);
  try {
    p.DefineOprt("%", remainder_of, mu::prMUL_DIV, mu::oaLEFT, true);
    p.DefineFun("floor", floor_of);
    p.DefineFun("ceil", ceil_of);
    p.DefineFun("ceil_div", ceil_div);
    p.DefineFun("div", floor_div);
    for (std::size_t i = 0; i < names_.size(); ++i) p.DefineVar(names_[i], &parser_->slots[i]);
    p.SetExpr(text_);
    p.Eval();  // parses now, so a bad expression is reported when the spec is read
  } catch (const mu::Parser::exception_type& e) {
    if (e.GetCode() == mu::ecUNASSIGNABLE_TOKEN)
      throw_error(ErrorKind::kInvalidInput,
                  fmt::format("{}: unknown name '{}'; known: {}", what_, e.GetToken(),
                              names_.empty() ? std::string("none") : fmt::format("{}", fmt::join(names_, ", "))));
    throw_error(ErrorKind::kInvalidInput, fmt::format("{}: {}", what_, e.GetMsg()));
  }
}

Expression::~Expression() = default;

bool Expression::uses(const std::string& name) const {
  std::lock_guard lock(mutex_);
  return parser_->parser.GetUsedVar().count(name) > 0;
}

double Expression::eval(const Values& values) const {
  std::lock_guard lock(mutex_);
  for (std::size_t i = 0; i < names_.size(); ++i) {
    const auto it = values.find(names_[i]);
    if (it == values.end()) throw_error(ErrorKind::kInternal, fmt::format("{}: no value for '{}'", what_, names_[i]));
    parser_->slots[i] = it->second;
  }
  try {
    return parser_->parser.Eval();
  } catch (const mu::Parser::exception_type& e) {
    throw_error(ErrorKind::kInvalidInput, fmt::format("{}: {}", what_, e.GetMsg()));
  }
}

long long Expression::eval_integer(const Values& values, long long lo, long long hi, const std::string& range) const {
  const double v = eval(values);
  KTUNE_REQUIRE(std::isfinite(v) && v == std::floor(v),
                fmt::format("{} = {:g} is not a whole number (use ceil_div(a, b) or div(a, b) for integer division)",
                            what_, v));
  // Whole numbers print in full (4294967301, not 4.29497e+09) up to 2^53, where doubles stop holding every one.
  const std::string shown = std::abs(v) <= 0x1p53 ? fmt::format("{:.0f}", v) : fmt::format("{:g}", v);
  // (double)hi rounds 2^63 - 1 up to 2^63, which no long long holds.
  KTUNE_REQUIRE(v >= static_cast<double>(lo) && v <= static_cast<double>(hi) && v < 0x1p63,
                fmt::format("{} = {} is outside {}{}..{}", what_, shown, range.empty() ? "" : range + ", ", lo, hi));
  return static_cast<long long>(v);
}

}  // namespace ktune::spec
