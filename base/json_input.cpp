// Bounded, one-line-error parsing of user JSON (see json_input.hpp).
#include "base/json_input.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <string>
#include <unordered_set>
#include <vector>

namespace ktune {
using nlohmann::json;

std::string excerpt(std::string_view text, std::size_t max) {
  std::string out;
  const std::string_view cut = "...";
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    std::string piece;
    if (c == '\n') piece = "\\n";
    else if (c == '\t') piece = "\\t";
    else if (c == '\r') piece = "\\r";
    else if (c < 0x20 || c >= 0x7f) piece = fmt::format("\\x{:02x}", c);
    else piece = std::string(1, static_cast<char>(c));
    const bool last = i + 1 == text.size();
    if (out.size() + piece.size() + (last ? 0 : cut.size()) > max) {
      out += cut;
      break;
    }
    out += piece;
  }
  return out;
}

std::string did_you_mean(std::string_view given, const std::vector<std::string>& known) {
  // Levenshtein distance, one row at a time.
  const auto distance = [](std::string_view a, std::string_view b) {
    std::vector<std::size_t> row(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
      std::size_t diagonal = row[0];
      row[0] = i;
      for (std::size_t j = 1; j <= b.size(); ++j) {
        const std::size_t above = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
        diagonal = above;
      }
    }
    return row[b.size()];
  };
  const std::string* best = nullptr;
  std::size_t best_distance = 0;
  for (const auto& k : known) {
    const std::size_t d = distance(given, k);
    if (d > 0 && d <= std::max<std::size_t>(1, std::max(given.size(), k.size()) / 3) && (!best || d < best_distance)) {
      best = &k;
      best_distance = d;
    }
  }
  return best ? " (did you mean '" + *best + "'?)" : "";
}

std::string json_error_reason(const json::exception& e) {
  std::string_view what = e.what();
  if (what.rfind("[json.exception.", 0) == 0)
    if (const auto close = what.find("] "); close != std::string_view::npos) what.remove_prefix(close + 2);
  if (what.rfind("parse error", 0) == 0)
    if (const auto colon = what.find(": "); colon != std::string_view::npos) what.remove_prefix(colon + 2);
  if (const auto echo = what.find("; last read"); echo != std::string_view::npos) what = what.substr(0, echo);
  return excerpt(what, 2 * kMaxExcerpt);  // nlohmann's words, save a token it may quote
}

namespace {

// Thrown out of the checks (Checks, below) at the first value nested too deep.
struct TooDeep {};
// Thrown out of them at a key given twice in one object (the parser would keep the last value, quietly).
struct Repeated {
  std::string key;
};

// The checks parse_json_input makes before the text is parsed into a document: each container's depth as it
// opens, before anything below it is read, and each object's keys. Builds nothing. (The parser callback that
// could make them builds the document through nlohmann's callback parser, which after each object looks through
// all of its parent's members for a discarded one: quadratic in an object's members that are objects, as a
// tuned cache's entries or a Kernel Tuner file's configurations.)
class Checks : public json::json_sax_t {
 public:
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    open();
    keys_.emplace_back();
    return true;
  }
  bool key(string_t& key) override {
    if (!keys_.back().insert(key).second) throw Repeated{key};
    return true;
  }
  bool end_object() override {
    keys_.pop_back();
    --depth_;
    return true;
  }
  bool start_array(std::size_t) override {
    open();
    return true;
  }
  bool end_array() override {
    --depth_;
    return true;
  }
  // A syntax error ends the checks; the parse after them meets it and says where.
  bool parse_error(std::size_t, const std::string&, const json::exception&) override { return false; }

 private:
  void open() {
    if (depth_++ >= kMaxJsonDepth) throw TooDeep{};
  }
  int depth_ = 0;  // containers open
  std::vector<std::unordered_set<std::string>> keys_;  // of each object open
};

// 1-based line and column of byte offset `at` in `text`.
std::pair<std::size_t, std::size_t> line_column(std::string_view text, std::size_t at) {
  at = std::min(at, text.size());
  const std::string_view head = text.substr(0, at);
  const std::size_t line = 1 + static_cast<std::size_t>(std::count(head.begin(), head.end(), '\n'));
  const std::size_t last_newline = head.rfind('\n');
  const std::size_t column = last_newline == std::string_view::npos ? at + 1 : at - last_newline;
  return {line, column};
}

[[noreturn]] void fail(std::string_view text, std::size_t at, const std::string& what, const std::string& reason,
                       ErrorKind kind, const std::string& expected) {
  const auto [line, column] = line_column(text, at);
  const std::size_t from = at > kMaxExcerpt / 2 ? at - kMaxExcerpt / 2 : 0;
  throw_error(kind, fmt::format("{} is not valid JSON: {} at line {}, column {}, near '{}'{}", what, reason, line,
                                column, excerpt(text.substr(from, kMaxExcerpt)),
                                expected.empty() ? "" : "; " + expected));
}

}  // namespace

std::int64_t int64_of(const json& value, const std::string& what) {
  KTUNE_REQUIRE(value.is_number_integer(), what + " must be an integer, got " + value.dump());
  KTUNE_REQUIRE(!value.is_number_unsigned() || value.get<std::uint64_t>() <= std::numeric_limits<std::int64_t>::max(),
                what + " is past the largest integer, 2^63 - 1: got " + value.dump());
  return value.get<std::int64_t>();
}

json parse_json_input(std::string_view text, const std::string& what, ErrorKind kind, const std::string& expected) {
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  try {
    Checks checks;
    json::sax_parse(begin, end, &checks);
    return json::parse(begin, end);
  } catch (const Repeated& r) {
    throw_error(kind, fmt::format("{} is not valid input: key '{}' is given twice in one object", what,
                                  excerpt(r.key)));
  } catch (const TooDeep&) {
    // The checks do not see the position; the first bracket past the limit is where they stopped.
    int depth = 0;
    std::size_t at = 0;
    bool in_string = false;
    for (; at < text.size(); ++at) {
      const char c = text[at];
      if (in_string) {
        if (c == '\\') ++at;
        else if (c == '"') in_string = false;
      } else if (c == '"') {
        in_string = true;
      } else if (c == '[' || c == '{') {
        if (++depth > kMaxJsonDepth) break;
      } else if (c == ']' || c == '}') {
        --depth;
      }
    }
    fail(text, at, what, fmt::format("nested deeper than {} levels", kMaxJsonDepth), kind, expected);
  } catch (const json::parse_error& e) {
    fail(text, e.byte > 0 ? e.byte - 1 : 0, what, json_error_reason(e), kind, expected);
  } catch (const json::exception& e) {
    throw_error(kind, fmt::format("{} is not valid JSON: {}{}", what, json_error_reason(e),
                                  expected.empty() ? "" : "; " + expected));
  }
}

}  // namespace ktune
