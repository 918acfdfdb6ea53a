// A tuned entry the run cannot use (its config off the family's space, or not
// valid for the problem on the device): the run takes the default, and a
// warning says which entry went unused and why.
#include <catch2/catch.hpp>

#include "cache/tuned_cache.hpp"
#include "templates/family.hpp"
#include "tuner/session/tuned_kernels.hpp"

namespace tuner_session_tuned_kernels_test {

using namespace ktune;
using namespace ktune::templates;

cache::Entry entry(const Family& f, const Problem& p, const DeviceLimits& device, const nlohmann::json& config) {
  cache::Entry e;
  e.key = tuner::cache_key(f, p, device);
  e.config = config;
  e.time_ms = e.p20_ms = e.p80_ms = 1;
  e.repetitions = 1;
  return e;
}

TEST_CASE("an exact tuned entry whose config the run cannot use gives the default and a warning naming it",
          "[tuner][cache]") {
  const Family& f = find_family("rmsnorm_fwd");
  const Problem p{"f32", {{"rows", 32}, {"dim", 64}}};
  const auto sm90 = DeviceLimits::for_arch("sm_90");
  const Config def = tuner::default_on(f, p, sm90);
  nlohmann::json off_space = def.to_json();
  off_space["threads"] = 7;  // an edited file: no such block size in the space
  nlohmann::json extra = def.to_json();
  extra["unroll_twice"] = 1;  // a parameter the space does not have
  for (const auto& config : {off_space, extra}) {
    INFO(config.dump());
    const cache::TunedCache tuned({entry(f, p, sm90, config)}, "tuned.json");
    std::vector<std::string> warnings;
    const auto chosen = tuner::choose_config(f, p, sm90, &tuned, &warnings);
    CHECK(chosen.match == cache::Match::kNone);
    CHECK(chosen.config == def);
    REQUIRE(warnings.size() == 1);
    CHECK_THAT(warnings[0], Catch::Contains("rmsnorm_fwd " + p.key() + " in tuned.json") &&
                                Catch::Contains(config.dump()) && Catch::Contains("not in the family's space") &&
                                Catch::Contains("the default runs instead"));
  }
  // In the space, but over the device's shared memory: the f32 attention backward's default on sm_89.
  const Family& bwd = find_family("attention_bwd");
  const Problem attention{"f32", {{"batch", 1}, {"heads", 2}, {"seq", 37}, {"head_dim", 64}, {"causal", 1}}};
  const auto sm89 = DeviceLimits::for_arch("sm_89");
  const Config big = bwd.default_config(attention);
  REQUIRE_FALSE(bwd.is_valid(big, attention, sm89));
  const cache::TunedCache too_big({entry(bwd, attention, sm89, big.to_json())}, "tuned.json");
  std::vector<std::string> big_warnings;
  const auto fitted = tuner::choose_config(bwd, attention, sm89, &too_big, &big_warnings);
  CHECK(fitted.config == tuner::default_on(bwd, attention, sm89));
  REQUIRE(big_warnings.size() == 1);
  CHECK_THAT(big_warnings[0], Catch::Contains("is not valid here") &&
                                  Catch::Contains("the valid config nearest the default on sm_89 runs instead"));
  // A usable entry warns of nothing.
  const cache::TunedCache good({entry(f, p, sm90, def.to_json())}, "tuned.json");
  std::vector<std::string> warnings;
  CHECK(tuner::choose_config(f, p, sm90, &good, &warnings).match == cache::Match::kExact);
  CHECK(warnings.empty());
}

TEST_CASE("where the nearest tuned shape's config cannot run the problem, the default's reason says which and why",
          "[tuner][cache]") {
  const Family& f = find_family("rmsnorm_fwd");
  const auto sm90 = DeviceLimits::for_arch("sm_90");
  const Problem tuned_for{"f32", {{"rows", 32}, {"dim", 64}}}, asked{"f32", {{"rows", 40}, {"dim", 64}}};
  nlohmann::json off_space = tuner::default_on(f, tuned_for, sm90).to_json();
  off_space["threads"] = 7;
  const cache::TunedCache tuned({entry(f, tuned_for, sm90, off_space)}, "tuned.json");
  const auto chosen = tuner::choose_config(f, asked, sm90, &tuned, nullptr);
  CHECK(chosen.match == cache::Match::kNone);
  CHECK(chosen.config == tuner::default_on(f, asked, sm90));
  CHECK_THAT(chosen.source, Catch::StartsWith("default (no usable tuned entry: the nearest, tuned for " +
                                              tuned_for.key() + ", has config " + off_space.dump() +
                                              ", which is not in the family's space ("));
}

}  // namespace tuner_session_tuned_kernels_test
