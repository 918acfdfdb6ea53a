// User JSON: bounded nesting, one-line errors with a short excerpt and no
// nlohmann exception ids.
#include "base/json_input.hpp"

#include <catch2/catch.hpp>

#include <chrono>

namespace base_json_input_test {

using ktune::ErrorKind;
using ktune::parse_json_input;

namespace {
std::string error_of(const std::string& text) {
  try {
    parse_json_input(text, "--problem", ErrorKind::kInvalidInput);
  } catch (const ktune::Error& e) {
    CHECK(e.kind() == ErrorKind::kInvalidInput);
    return e.what();
  }
  FAIL("expected an error for " << ktune::excerpt(text));
  return {};
}
}  // namespace

TEST_CASE("excerpt: at most 80 characters, control bytes escaped", "[base][json]") {
  CHECK(ktune::excerpt("short") == "short");
  CHECK(ktune::excerpt("a\nb\x01") == "a\\nb\\x01");
  const std::string cut = ktune::excerpt(std::string(1000, 'x'));
  CHECK(cut.size() <= ktune::kMaxExcerpt);
  CHECK_THAT(cut, Catch::EndsWith("..."));
}

TEST_CASE("parse errors: one line naming the input, position and reason, no exception id", "[base][json]") {
  const std::string e = error_of("{\"dtype\": \"f32\", \"dims\": {\"n\": 4,}}");
  CHECK_THAT(e, Catch::StartsWith("--problem is not valid JSON: ") && Catch::Contains("line 1, column"));
  CHECK_THAT(e, !Catch::Contains("json.exception"));
  // An unterminated 5 MB string is quoted by a short excerpt, not echoed whole.
  const std::string huge = error_of("{\"a\": \"" + std::string(5 << 20, 'z'));
  CHECK(huge.size() < 400);
  CHECK_THAT(huge, !Catch::Contains("json.exception"));
  CHECK(huge.find('\n') == std::string::npos);
}

TEST_CASE("a key given twice in one object is refused, not read as its last value", "[base][json]") {
  CHECK(error_of(R"({"dtype": "f32", "dims": {"rows": 64, "dim": 8, "rows": 5}})") ==
        "--problem is not valid input: key 'rows' is given twice in one object");
  // The same key in two objects, or in an object and one nested in it, is no repeat.
  CHECK(parse_json_input(R"({"a": {"a": 1}, "b": {"a": 2}, "c": [{"a": 3}, {"a": 4}]})", "x", ErrorKind::kInvalidInput)
            .at("c")
            .at(1)
            .at("a") == 4);
}

TEST_CASE("nesting deeper than the bound is refused at once, however deep", "[base][json]") {
  const std::string ok = std::string(ktune::kMaxJsonDepth, '[') + std::string(ktune::kMaxJsonDepth, ']');
  CHECK(parse_json_input(ok, "x", ErrorKind::kInvalidInput).is_array());
  CHECK_THAT(error_of("[" + ok + "]"), Catch::Contains("nested deeper than 64"));  // one past it
  const auto start = std::chrono::steady_clock::now();
  const std::string deep = error_of(std::string(50 << 20, '['));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  CHECK_THAT(deep, Catch::Contains("nested deeper than 64"));
  CHECK(deep.size() < 400);
  std::string nested;
  for (int i = 0; i < 100000; ++i) nested += "{\"a\": ";
  const std::string objects = error_of(nested);
  CHECK_THAT(objects, Catch::Contains("nested deeper than 64"));
}

}  // namespace base_json_input_test
