// A deterministic run's configs (tuner::choose_config with `deterministic`):
// the one chosen where it sums in a fixed order (Family::deterministic),
// else the valid config nearest it that does, said in its source.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <utility>

#include "base/error.hpp"
#include "search/sampling.hpp"
#include "templates/family.hpp"
#include "tuner/session/tuned_kernels.hpp"

namespace tuner_session_deterministic_test {

using namespace ktune;
using namespace ktune::templates;
using ktune::tuner::choose_config;

namespace {

// Parameters changed, then steps along their domains, as choose_config counts them.
std::pair<int, int> distance(const Space& space, const Config& a, const Config& b) {
  const search::Point x = search::point_of(space, a), y = search::point_of(space, b);
  std::pair<int, int> d{0, 0};
  for (std::size_t k = 0; k < x.size(); ++k) {
    d.first += x[k] != y[k] ? 1 : 0;
    d.second += std::abs(x[k] - y[k]);
  }
  return d;
}

}  // namespace

TEST_CASE("a deterministic run's configs: on every arch, each family's own where it sums in a fixed order, else a "
          "valid one that does",
          "[tuner][deterministic]") {
  int changed = 0;
  for (const Family* f : all_families())
    for (const auto& p : f->problem_classes())
      for (const auto& arch : DeviceLimits::known_archs()) {
        INFO(f->name() << " " << p.key() << " " << arch);
        const auto limits = DeviceLimits::for_arch(arch);
        const auto plain = choose_config(*f, p, limits, nullptr, nullptr);
        if (f->name() == "prim_index_add") {  // index_add_ adds by atomics in every config
          CHECK_FALSE(f->deterministic(plain.config));
          CHECK_THROWS_WITH(choose_config(*f, p, limits, nullptr, nullptr, true),
                            Catch::Contains("prim_index_add: no config of the space is both valid for") &&
                                Catch::Contains("the run cannot be deterministic"));
          continue;
        }
        const auto fixed = choose_config(*f, p, limits, nullptr, nullptr, true);
        CHECK(f->is_valid(fixed.config, p, limits));
        CHECK(f->deterministic(fixed.config));
        CHECK(fixed.made_deterministic == !f->deterministic(plain.config));
        if (!fixed.made_deterministic) {
          CHECK(fixed.config == plain.config);
          CHECK(fixed.source == plain.source);
        } else {
          ++changed;
          CHECK_THAT(fixed.source, Catch::StartsWith(plain.source + "; made deterministic ("));
        }
      }
  CHECK(changed > 0);  // attention_bwd's defaults add dQ by atomics
}

TEST_CASE("a deterministic run's attention backward on sm_90: wgmma's dQ by atomics gives way to the nearest valid "
          "config with dQ by a second pass",
          "[tuner][deterministic]") {
  const Family& f = find_family("attention_bwd");
  const Problem p{"bf16", {{"batch", 1}, {"heads", 16}, {"seq", 16384}, {"head_dim", 64}, {"causal", 1}}};
  const auto sm90 = DeviceLimits::for_arch("sm_90");
  const auto plain = choose_config(f, p, sm90, nullptr, nullptr);
  REQUIRE(plain.config.at("mma") == 1);  // wgmma, dQ by atomics
  REQUIRE_FALSE(f.deterministic(plain.config));
  const auto fixed = choose_config(f, p, sm90, nullptr, nullptr, true);
  CHECK(fixed.config.at("dq_atomic") == 0);
  CHECK(fixed.config.at("mma") == 0);  // wgmma's pass adds dQ by atomics only
  CHECK_THAT(fixed.source, Catch::Contains("made deterministic (") && Catch::Contains("dq_atomic 1 -> 0") &&
                               Catch::Contains("mma 1 -> 0"));
  // No valid config that sums in a fixed order is nearer.
  const auto chosen = distance(f.space(), plain.config, fixed.config);
  for (std::uint64_t i = 0; i < f.space().size(); ++i) {
    const Config c = search::config_of(f.space(), search::point_at(f.space(), i));
    if (distance(f.space(), plain.config, c) < chosen && f.deterministic(c)) CHECK_FALSE(f.is_valid(c, p, sm90));
  }
}

TEST_CASE("a deterministic run takes a tuned entry that sums by atomics as the nearest config that does not, "
          "and says so",
          "[tuner][deterministic]") {
  const Family& f = find_family("embedding_bwd");
  const Problem p{"f32", {{"rows", 2048}, {"dim", 768}, {"vocab", 50257}}};
  const auto sm90 = DeviceLimits::for_arch("sm_90");
  Config atomic = f.default_config(p);
  atomic.set("deterministic", 0);
  REQUIRE(f.is_valid(atomic, p, sm90));
  REQUIRE_FALSE(f.deterministic(atomic));
  cache::Entry e;
  e.key = tuner::cache_key(f, p, sm90);
  e.config = atomic.to_json();
  e.time_ms = e.p20_ms = e.p80_ms = 1;
  e.repetitions = 1;
  const cache::TunedCache tuned({e});
  const auto plain = choose_config(f, p, sm90, &tuned, nullptr);
  CHECK(plain.match == cache::Match::kExact);
  CHECK(plain.config == atomic);
  const auto fixed = choose_config(f, p, sm90, &tuned, nullptr, true);
  CHECK(fixed.match == cache::Match::kExact);  // still the tuned entry's shape, one parameter changed
  CHECK(fixed.made_deterministic);
  Config sorted = atomic;
  sorted.set("deterministic", 1);  // one step along the domain: the sort
  CHECK(fixed.config == sorted);
  CHECK(fixed.source == plain.source + "; made deterministic (deterministic 0 -> 1)");
  // A tuned entry that sums in a fixed order stays as it is.
  e.config = sorted.to_json();
  const cache::TunedCache kept({e});
  const auto same = choose_config(f, p, sm90, &kept, nullptr, true);
  CHECK(same.config == sorted);
  CHECK_FALSE(same.made_deterministic);
}

}  // namespace tuner_session_deterministic_test
