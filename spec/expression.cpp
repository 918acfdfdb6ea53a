#include "spec/expression.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <muParser.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <regex>
#include <string_view>
#include <vector>

#include "base/error.hpp"

namespace ktune::spec {
namespace {

/// Thrown through muparser by an integer division by zero, where Python raises (a NaN would turn every
/// comparison false: a restriction that fails for no reason given).
struct DivisionByZero {};

double divisor(double b) { return b == 0 ? throw DivisionByZero{} : b; }
// Python's remainder: the sign of the divisor, so a == a // b * b + a % b with floor division.
double remainder_of(double a, double b) {
  const double r = std::fmod(a, divisor(b));
  return r != 0 && (r < 0) != (b < 0) ? r + b : r;
}
double floor_of(double a) { return std::floor(a); }
double ceil_of(double a) { return std::ceil(a); }
double ceil_div(double a, double b) { return std::ceil(a / divisor(b)); }
// Python's floor division of floats (float_floor_div in CPython): the whole number a - a % b is b times,
// exact where floor(a / b) rounds past it (1 // 0.1 is 9, not 10).
double floor_div(double a, double b) {
  const double div = (a - remainder_of(a, b)) / b;  // whole, but for rounding
  const double floor = std::floor(div);
  return div - floor > 0.5 ? floor + 1.0 : floor;
}
double power(double a, double b) { return std::pow(a, b); }
double truncated(double a) { return std::trunc(a); }
double rounded(double a) { return std::nearbyint(a); }  // halves to even, as Python's round()
double logical_not(double a) { return a == 0 ? 1 : 0; }

/// muparser's reader of Python's number literals its own does not read: 0x1f, 0o17, 0b101, and underscores
/// between digits (1_000, 1_0.5e1_0). `expr` is the text from the reader's position; 0 where none starts there.
int python_literal(const char* expr, int* pos, double* value) {
  const std::string_view s(expr);
  if (s.size() > 2 && s[0] == '0' && std::string_view("xXoObB").find(s[1]) != std::string_view::npos) {
    const int base = s[1] == 'x' || s[1] == 'X' ? 16 : s[1] == 'o' || s[1] == 'O' ? 8 : 2;
    double v = 0;
    std::size_t i = 2;
    for (; i < s.size(); ++i) {
      const char c = static_cast<char>(std::tolower(static_cast<unsigned char>(s[i])));
      const int d = std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : 99;
      if (c == '_' && i + 1 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1]))) continue;
      if (d >= base) break;
      v = v * base + d;
    }
    if (i == 2) return 0;
    *pos += static_cast<int>(i);
    *value = v;
    return 1;
  }
  static const std::regex decimal("^[0-9](_?[0-9])*(\\.([0-9](_?[0-9])*)?)?([eE][+-]?[0-9](_?[0-9])*)?");
  std::cmatch m;
  if (!std::regex_search(expr, m, decimal) || m.str().find('_') == std::string::npos) return 0;  // muparser's
  std::string digits = m.str();
  std::erase(digits, '_');
  *pos += static_cast<int>(m.length());
  *value = std::strtod(digits.c_str(), nullptr);
  return 1;
}

/// The character at `text[i]`, whole where it is UTF-8 of more than one byte.
std::string character_at(const std::string& text, std::size_t i) {
  std::size_t end = i + 1;
  while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xc0) == 0x80) ++end;
  return text.substr(i, end - i);
}

/// What Python spells that the expressions do not read, and what to write instead.
std::string python_hint(const std::string& name) {
  if (name == "if" || name == "else") return " (Python's conditional 'x if c else y' is not read: write c ? x : y)";
  if (name == "in") return " ('in' takes a parenthesized or bracketed list of values: a in (1, 2))";
  if (name == "is") return " (Python's 'is' is not read: write ==)";
  return "";
}

// Python's words and muparser's spelling of them, padded to the word's length so a syntax error's position in
// the rewritten text is its position in the text as written.
constexpr std::array<std::pair<std::string_view, std::string_view>, 5> kWords{
    {{"and", "&& "}, {"or", "||"}, {"not", "!  "}, {"True", "1   "}, {"False", "0    "}}};

bool name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; }

/// `text` with Python's words in muparser's spelling (whole words only: `order`, `nothing` stay).
std::string with_operators(const std::string& text) {
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    if (!name_char(text[i])) {
      out += text[i++];
      continue;
    }
    std::size_t end = i;
    while (end < text.size() && name_char(text[end])) ++end;
    const std::string_view word(text.data() + i, end - i);
    const auto it = std::find_if(kWords.begin(), kWords.end(), [&](const auto& w) { return w.first == word; });
    out += it == kWords.end() ? word : it->second;
    i = end;
  }
  std::replace(out.begin(), out.end(), '[', '(');  // a list of values, for 'in'
  std::replace(out.begin(), out.end(), ']', ')');
  return out;
}

/// The word at `s[i]` where one starts there (not within a name), else empty.
std::string_view word_at(std::string_view s, std::size_t i) {
  if (i >= s.size() || !name_char(s[i]) || (i > 0 && name_char(s[i - 1]))) return {};
  std::size_t end = i;
  while (end < s.size() && name_char(s[end])) ++end;
  return s.substr(i, end - i);
}

/// Python's `left in (a, b, ...)` (or `not in`) as `(((left)==(a))||((left)==(b))...)`; the text as it was
/// where `right` is no parenthesized list (then it does not parse, and the text's error is said).
std::string membership(const std::string& left, const std::string& op, const std::string& right) {
  const std::string as_was = left + " " + op + " " + right;
  const std::size_t first = right.find_first_not_of(" \t"), last = right.find_last_not_of(" \t");
  if (first == std::string::npos || right[first] != '(' || right[last] != ')') return as_was;
  std::vector<std::string> items(1);
  int depth = 0;
  for (std::size_t k = first; k <= last; ++k) {
    const char c = right[k];
    if (c == '(' && depth++ == 0) continue;
    if (c == ')' && --depth == 0) {
      if (k != last) return as_was;  // (a) + (b): two parenthesized parts, no list
      continue;
    }
    if (c == ',' && depth == 1) {
      items.emplace_back();
      continue;
    }
    items.back() += c;
  }
  std::string any;
  for (const auto& x : items)
    if (x.find_first_not_of(" \t") != std::string::npos)  // (a trailing comma: '(4,)')
      any += fmt::format("{}(({})==({}))", any.empty() ? "" : "||", left, x);
  any = any.empty() ? "0" : "(" + any + ")";
  return op == "in" ? any : "!(" + any + ")";
}

/// The comparison operator at `s[i]`, or 0 characters: <=, >=, ==, !=, <, >.
std::size_t comparison_at(std::string_view s, std::size_t i) {
  if (i + 1 < s.size() && s[i + 1] == '=' && (s[i] == '<' || s[i] == '>' || s[i] == '=' || s[i] == '!')) return 2;
  return s[i] == '<' || s[i] == '>' ? 1 : 0;
}

/// `and`s and `or`s (muparser's && and ||, which evaluate both sides) as Python's: `terms` joined by `ops`
/// ("&&" or "||"), the right side evaluated only where the left does not decide, so a guard keeps its division
/// from running (`tile == 0 or n % tile == 0`). `a && b` is `((a) ? ((b) != 0) : 0)`, `a || b` is
/// `((a) ? 1 : ((b) != 0))`; `&&` binds tighter.
std::string short_circuit(const std::vector<std::string>& terms, const std::vector<std::string>& ops) {
  if (ops.empty()) return terms.front();
  std::vector<std::vector<std::string>> groups(1);  // the or's operands, each an and of terms
  for (std::size_t k = 0; k < terms.size(); ++k) {
    groups.back().push_back(terms[k]);
    if (k < ops.size() && ops[k] == "||") groups.emplace_back();
  }
  const auto chain = [](const std::vector<std::string>& xs, const std::string& taken, const std::string& not_taken) {
    std::string text = fmt::format("(({}) != 0)", xs.back());
    for (std::size_t k = xs.size() - 1; k-- > 0;)
      text = fmt::format("(({}) ? {} : {})", xs[k], taken.empty() ? text : taken, not_taken.empty() ? text : not_taken);
    return text;
  };
  std::vector<std::string> ands;
  for (const auto& group : groups) ands.push_back(group.size() == 1 ? group.front() : chain(group, "", "0"));
  return chain(ands, "1", "");
}

/// Python's precedence of `not`, its chained comparisons and its short-circuit `and` and `or` in muparser's
/// terms, at every depth of parentheses. Within each span between `&&`, `||`, `?`, `:` and `,`: `a < b <= c`
/// becomes `((a < b)&&(b <= c))`, where muparser would take `(a < b) <= c`; and the `!`s (Python's `not`) that
/// lead a span apply to all of it, one after another (`! ! a < -b` is `!(!(a < -b))`: muparser's prefix
/// operator takes neither another nor a sign after it). Spans joined by `&&` and `||` become short_circuit's.
std::string unchain(std::string_view s) {
  std::string out;
  std::vector<std::string> operands(1), ops;  // of the span being read: operands between comparisons
  std::vector<std::string> spans, joins;      // of the run of spans joined by && and ||
  const auto end_span = [&] {
    std::string& first = operands.front();
    const std::size_t lead = std::min(first.find_first_not_of(" \t"), first.size());
    const std::size_t body = std::min(first.find_first_not_of(" \t!"), first.size());
    const auto nots = static_cast<std::size_t>(std::count(first.begin() + lead, first.begin() + body, '!'));
    std::string span = first.substr(0, lead);
    for (std::size_t k = 0; k < nots; ++k) span += "!(";
    first.erase(0, body);
    const auto pair = [&](std::size_t k) {  // operands[k] ops[k] operands[k + 1]
      return ops[k] == "in" || ops[k] == "not in" ? membership(operands[k], ops[k], operands[k + 1])
                                                  : operands[k] + ops[k] + operands[k + 1];
    };
    if (ops.empty()) {
      span += operands.front();
    } else if (ops.size() == 1) {
      span += pair(0);
    } else {
      span += "(";
      for (std::size_t k = 0; k < ops.size(); ++k) span += fmt::format("{}({})", k ? "&&" : "", pair(k));
      span += ")";
    }
    span += std::string(nots, ')');
    spans.push_back(std::move(span));
    operands.assign(1, "");
    ops.clear();
  };
  const auto end_run = [&] {
    end_span();
    out += short_circuit(spans, joins);
    spans.clear();
    joins.clear();
  };
  for (std::size_t i = 0; i < s.size();) {
    if (s[i] == '(') {
      std::size_t depth = 1, j = i + 1;
      for (; j < s.size() && depth > 0; ++j) depth += s[j] == '(' ? 1 : s[j] == ')' ? -1 : 0;
      // (An unclosed parenthesis runs to the end: the text does not parse, and its error is the text's.)
      operands.back() += "(" + unchain(s.substr(i + 1, depth > 0 ? j - i - 1 : j - i - 2)) + (depth > 0 ? "" : ")");
      i = j;
    } else if (const std::size_t n = comparison_at(s, i); n > 0) {
      ops.emplace_back(s.substr(i, n));
      operands.emplace_back();
      i += n;
    } else if (const std::string_view word = word_at(s, i); !word.empty()) {
      if (word == "in") {  // a comparison, as Python's
        ops.emplace_back("in");
        operands.emplace_back();
      } else {
        operands.back() += word;
      }
      i += word.size();
    } else if (s[i] == '!' && word_at(s, std::min(s.find_first_not_of(" \t", i + 1), s.size())) == "in") {
      ops.emplace_back("not in");  // Python's 'not in', respelt '!   in'
      operands.emplace_back();
      i = s.find_first_not_of(" \t", i + 1) + 2;
    } else if (s.substr(i, 2) == "&&" || s.substr(i, 2) == "||") {
      end_span();
      joins.emplace_back(s.substr(i, 2));
      i += 2;
    } else if (s[i] == '?' || s[i] == ':' || s[i] == ',') {
      end_run();
      out += s[i++];
    } else {
      operands.back() += s[i++];
    }
  }
  end_run();
  return out;
}

}  // namespace

bool is_identifier(const std::string& name) {
  return !name.empty() && !std::isdigit(static_cast<unsigned char>(name.front())) &&
         std::all_of(name.begin(), name.end(), name_char);
}

bool is_expression_word(const std::string& name) {
  return name == "in" || std::any_of(kWords.begin(), kWords.end(), [&](const auto& w) { return w.first == name; });
}

struct Expression::Parser {
  mu::Parser parser;
  std::vector<double> slots;  // one per name, in names_ order; the parser reads them by address
};

Expression::Expression(std::string text, std::string what, const std::vector<std::string>& names)
    : text_(std::move(text)), what_(std::move(what)), names_(names), parser_(std::make_unique<Parser>()) {
  auto& p = parser_->parser;
  parser_->slots.assign(names_.size(), 1.0);  // the parse's evaluation divides by none of them
  try {
    p.ClearConst();  // muparser's _pi and _e: names a tunable may take
    // Not folded as the text is parsed (a constant `1 // 0` would throw from the parse), evaluated only.
    p.DefineOprt("%", remainder_of, mu::prMUL_DIV, mu::oaLEFT, false);
    p.DefineOprt("//", floor_div, mu::prMUL_DIV, mu::oaLEFT, false);
    p.DefineOprt("**", power, mu::prPOW, mu::oaRIGHT, true);
    p.DefineInfixOprt("!", logical_not, mu::prLOGIC);  // looser than a comparison, as Python's `not`
    p.DefineFun("floor", floor_of);
    p.DefineFun("ceil", ceil_of);
    p.DefineFun("ceil_div", ceil_div, false);
    p.DefineFun("div", floor_div, false);
    p.DefineFun("int", truncated);
    p.DefineFun("round", rounded);
    p.DefineFun("pow", power);
    p.AddValIdent(python_literal);
    for (std::size_t i = 0; i < names_.size(); ++i) p.DefineVar(names_[i], &parser_->slots[i]);
    // muparser assigns with a lone '=': a restriction 'x = 64' held for every config, silently.
    for (std::size_t i = 0; i < text_.size(); ++i) {
      const char next = i + 1 < text_.size() ? text_[i + 1] : '\0';
      KTUNE_REQUIRE(text_[i] != '=' || (i > 0 && std::string_view("<>!=").find(text_[i - 1]) != std::string::npos) ||
                        next == '=',
                    fmt::format("{}: '=' at position {} would assign; write '==' to compare{}", what_, i,
                                next == '<' || next == '>' ? fmt::format(" (or '{}=' for '={}')", next, next) : ""));
    }
    // Parentheses and brackets balanced, said here: rewriting an `in` list, or a chained comparison, in an
    // unclosed one could close it ('a in (1, (3)' read as 'a in (1, 3)').
    std::vector<std::size_t> open;
    for (std::size_t i = 0; i < text_.size(); ++i) {
      if (text_[i] == '(' || text_[i] == '[') open.push_back(i);
      if (text_[i] != ')' && text_[i] != ']') continue;
      KTUNE_REQUIRE(!open.empty(), fmt::format("{}: '{}' at position {} closes nothing", what_, text_[i], i));
      open.pop_back();
    }
    KTUNE_REQUIRE(open.empty(), fmt::format("{}: '{}' at position {} is never closed", what_, text_[open.front()],
                                            open.front()));
    const std::string spelt = with_operators(text_);
    try {
      p.SetExpr(unchain(spelt));
      p.Eval();  // parses now, so a bad expression is reported when the spec is read
    } catch (const mu::Parser::exception_type&) {
      // Said of the text as written (Python's words respelt in place), where its positions hold.
      p.SetExpr(spelt);
      p.Eval();
      throw;
    }
  } catch (const DivisionByZero&) {  // at the values the parse runs with: said where a config's values give it
  } catch (const mu::Parser::exception_type& e) {
    const std::string& token = e.GetToken();
    const auto at = static_cast<std::size_t>(e.GetPos());
    if (e.GetCode() == mu::ecUNASSIGNABLE_TOKEN && !token.empty() && !name_char(token.front()) && at < text_.size())
      throw_error(ErrorKind::kInvalidInput, fmt::format("{}: '{}' at position {} is no operator of the expressions",
                                                        what_, character_at(text_, at), at));
    if (e.GetCode() == mu::ecUNASSIGNABLE_TOKEN)
      throw_error(ErrorKind::kInvalidInput,
                  fmt::format("{}: unknown name '{}'; known: {}{}", what_, token,
                              names_.empty() ? std::string("none") : fmt::format("{}", fmt::join(names_, ", ")),
                              python_hint(token)));
    // A word respelt ('not' read as '!') is named as written (muparser's position is at or just past it).
    for (std::size_t from : {at, at - 1}) {
      if (from >= text_.size() || !name_char(text_[from])) continue;
      while (from > 0 && name_char(text_[from - 1])) --from;
      std::size_t end = from;
      while (end < text_.size() && name_char(text_[end])) ++end;
      const std::size_t next = std::min(text_.find_first_not_of(" \t", end), text_.size());
      if (const std::string word = text_.substr(from, end - from); is_expression_word(word))
        throw_error(ErrorKind::kInvalidInput,
                    fmt::format("{}: '{}' at position {} is out of place{}", what_, word, from,
                                word == "not" && text_.compare(next, 3, "in ") == 0 ? python_hint("in") : ""));
    }
    throw_error(ErrorKind::kInvalidInput, fmt::format("{}: {}", what_,
                                                      e.GetCode() == mu::ecINTERNAL_ERROR ? "incomplete expression"
                                                                                          : e.GetMsg()));
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
  } catch (const DivisionByZero&) {
    throw_error(ErrorKind::kInvalidInput, fmt::format("{}: a division by zero here", what_));
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
