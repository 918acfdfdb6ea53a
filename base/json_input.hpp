// JSON read from user input (cache files, --problem, --config, Kernel Tuner
// files): nesting is bounded, and errors are one line that quotes at most a
// short excerpt of the text and never nlohmann's exception ids.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.hpp"

namespace ktune {

/// Deepest nesting of arrays and objects accepted in user JSON. ktune's own
/// files nest 5 deep; the bound keeps recursive copies, dumps and
/// destructions of hostile input far from the stack's end.
inline constexpr int kMaxJsonDepth = 64;

/// Longest excerpt of user text an error message quotes.
inline constexpr std::size_t kMaxExcerpt = 80;

/// At most `max` characters of `text` for an error message: control and
/// non-ASCII bytes escaped (\n, \x01), "..." in place of what was cut.
std::string excerpt(std::string_view text, std::size_t max = kMaxExcerpt);

/// " (did you mean 'x'?)" for the one of `known` closest to `given`, a
/// name a user typed, where it is a slip away (edit distance at most a
/// third of the longer name, and at least 1); else "".
std::string did_you_mean(std::string_view given, const std::vector<std::string>& known);

/// The reason of a nlohmann exception without its "[json.exception...]" id,
/// position prefix and "last read" echo, cut to 2 * kMaxExcerpt characters.
std::string json_error_reason(const nlohmann::json::exception& e);

/// Parses `text`, user input named by `what` (e.g. "--problem", "cache file
/// x.json"). Throws Error(kind), one line: `what`, line and column, the
/// reason, and an excerpt near the error; nesting deeper than kMaxJsonDepth
/// is refused the same way as soon as it is read; then `expected` (what the
/// input should look like, or where its format is told) where given.
nlohmann::json parse_json_input(std::string_view text, const std::string& what, ErrorKind kind,
                                const std::string& expected = "");

/// `value` as a signed 64-bit integer; throws kInvalidInput naming `what`
/// (e.g. "config parameter 'threads'") for anything else: not an integer,
/// or an unsigned one past 2^63 - 1 (which would wrap).
std::int64_t int64_of(const nlohmann::json& value, const std::string& what);

}  // namespace ktune
