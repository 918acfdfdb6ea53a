#include "base/space.hpp"

#include <catch2/catch.hpp>
#include <set>

#include "base/error.hpp"

namespace base_space_test {

using ktune::Config;
using ktune::Param;
using ktune::Space;

TEST_CASE("space enumerates every point once, by mixed-radix index", "[space]") {
  const Space s({{"a", {1, 2, 3}, ""}, {"b", {10, 20}, ""}, {"c", {7}, ""}});
  REQUIRE(s.size() == 6);
  std::set<Config> seen;
  for (std::uint64_t i = 0; i < s.size(); ++i) {
    const Config c = s.at(i);
    REQUIRE(s.index_of(c) == i);
    seen.insert(c);
  }
  CHECK(seen.size() == 6);
  CHECK(s.at(0) == Config({{"a", 1}, {"b", 10}, {"c", 7}}));
  CHECK(s.at(5) == Config({{"a", 3}, {"b", 20}, {"c", 7}}));
}

TEST_CASE("space rejects configs outside it with the accepted values", "[space]") {
  const Space s({{"threads", {128, 256}, ""}});
  CHECK_NOTHROW(s.check_member(Config({{"threads", 128}})));
  CHECK_THROWS_WITH(s.check_member(Config({{"threads", 100}})), Catch::Contains("{128, 256}"));
  CHECK_THROWS_WITH(s.check_member(Config({{"threads", 128}, {"x", 1}})), Catch::Contains("unknown tunable 'x'"));
  CHECK_THROWS_WITH(s.check_member(Config()), Catch::Contains("missing tunable 'threads'"));
  CHECK_FALSE(s.index_of(Config({{"threads", 100}})).has_value());
}

TEST_CASE("a 10^6-point space is indexed without materialising it", "[space]") {
  std::vector<Param> params;
  for (int i = 0; i < 6; ++i) params.push_back({"p" + std::to_string(i), {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, ""});
  const Space s(params);
  REQUIRE(s.size() == 1000000);
  const Config c = s.at(123456);
  CHECK(c.at("p0") == 1);
  CHECK(c.at("p5") == 6);
  CHECK(s.index_of(c) == 123456u);
}

TEST_CASE("config JSON round-trips and rejects non-integers", "[space]") {
  const Config c({{"vec", 4}, {"threads", 256}});
  CHECK(Config::from_json(nlohmann::json::parse(c.str())) == c);
  CHECK(c.str() == R"({"threads":256,"vec":4})");
  CHECK_THROWS_AS(Config::from_json(nlohmann::json::parse(R"({"threads":"a"})")), ktune::Error);
  CHECK_THROWS_AS(Config::from_json(nlohmann::json::parse("[1,2]")), ktune::Error);
}

}  // namespace base_space_test
