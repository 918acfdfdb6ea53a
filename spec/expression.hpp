// Expressions of a kernel spec (restrictions, grid and block, element
// counts, scalar arguments, FLOP and byte counts) over the spec's tunables and
// problem dimensions, evaluated by muparser. Beside muparser's own operators
// (+ - * / ^, comparisons, && ||, ?:) and functions (min, max, abs, ...)
// they have `%` (Python's remainder), floor, ceil, ceil_div(a, b) and
// div(a, b) (floor division), and Python's spelling, as Kernel Tuner's
// restrictions are written: `and` and `or` (also `&&`, `||`; short-circuit),
// `not` (also `!`), `True`, `False`, `//` (floor division), `**` (power),
// int(), round(), pow(), 0x/0o/0b and 1_000 literals, `in` and `not in` a
// list of values, and chained comparisons (`32 <= x * y <= 1024` is
// `32 <= x * y && x * y <= 1024`). An integer division or remainder by zero
// throws kInvalidInput where it is evaluated, as Python raises.
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ktune::spec {

/// Values of the names an expression may use.
using Values = std::map<std::string, double>;

/// Whether `name` is an identifier (letters, digits, _; not a digit first): what
/// a spec's names, macros and variables must be.
bool is_identifier(const std::string& name);

/// Whether `name` is a word expressions read as an operator or a constant
/// (Python's and, or, not, in, True, False), which no tunable, dimension or
/// parameter may be named.
bool is_expression_word(const std::string& name);

/// One expression, checked against the names it may use when it is made.
/// Evaluation is serialised (muparser's parser is not reentrant), so one
/// Expression may be shared between threads.
class Expression {
 public:
  /// Parses `text`; `what` names it in messages ("restriction 'n % vec == 0'").
  /// Throws kInvalidInput on a syntax error or a name not in `names`,
  /// listing the names that are known.
  Expression(std::string text, std::string what, const std::vector<std::string>& names);
  ~Expression();
  Expression(const Expression&) = delete;
  Expression& operator=(const Expression&) = delete;

  const std::string& text() const { return text_; }
  /// Whether the expression reads `name`.
  bool uses(const std::string& name) const;
  /// The value for `values` (which must hold every name given at construction).
  double eval(const Values& values) const;
  /// eval() as a whole number; throws kInvalidInput when the value is not one
  /// (a grid of 12.5 blocks) or lies outside [lo, hi] (`range` names that
  /// range in the message, e.g. "the range of i32").
  long long eval_integer(const Values& values, long long lo, long long hi, const std::string& range = "") const;

 private:
  struct Parser;
  std::string text_, what_;
  std::vector<std::string> names_;
  std::unique_ptr<Parser> parser_;
  mutable std::mutex mutex_;
};

}  // namespace ktune::spec
