// What a run without a tuned entry takes on a device (tuner::default_on):
// the arch's default where the family has one, else the family's default
// where it fits, else the valid config nearest it.
#include <catch2/catch.hpp>

#include "base/error.hpp"
#include "templates/family.hpp"
#include "tuner/session/tuned_kernels.hpp"

namespace tuner_session_default_on_test {

using namespace ktune;
using namespace ktune::templates;
using ktune::tuner::default_on;

TEST_CASE("every family's run-time default is valid on every known arch, and is the family's default where that "
          "fits",
          "[templates][default]") {
  for (const Family* f : all_families())
    for (const auto& p : f->problem_classes())
      for (const auto& arch : DeviceLimits::known_archs()) {
        INFO(f->name() << " " << p.key() << " " << arch);
        const auto limits = DeviceLimits::for_arch(arch);
        const Config c = default_on(*f, p, limits);
        CHECK(f->is_valid(c, p, limits));
        if (const auto arch = f->arch_default(p, limits); arch && f->is_valid(*arch, p, limits))
          CHECK(c == *arch);
        else if (f->is_valid(f->default_config(p), p, limits))
          CHECK(c == f->default_config(p));
      }
}

TEST_CASE("on sm_90 the 16-bit attention at head dims 64 and 128 on a busy grid defaults to the wgmma kernels, "
          "elsewhere to the family's default",
          "[templates][default]") {
  const Family& fwd = find_family("attention_fwd");
  const Family& bwd = find_family("attention_bwd");
  const auto sm90 = DeviceLimits::for_arch("sm_90"), sm80 = DeviceLimits::for_arch("sm_80");
  auto problem = [](const char* dtype, std::int64_t head_dim, std::int64_t causal, std::int64_t seq) {
    return Problem{dtype, {{"batch", 1}, {"heads", 16}, {"seq", seq}, {"head_dim", head_dim}, {"causal", causal}}};
  };
  const Problem leaderboard = problem("bf16", 64, 1, 16384);
  Config c = default_on(fwd, leaderboard, sm90);
  CHECK(c.at("mma") == 1);
  CHECK(c.at("block_n") == 64);
  CHECK(c.at("tile_order") == 1);
  CHECK(default_on(fwd, problem("bf16", 64, 0, 16384), sm90).at("tile_order") == 0);
  c = default_on(fwd, problem("f16", 128, 1, 16384), sm90);
  CHECK(c.at("mma") == 2);
  CHECK(c.at("block_n") == 128);
  c = default_on(bwd, leaderboard, sm90);
  CHECK(c.at("mma") == 1);
  CHECK(c.at("block_m") == 128);
  CHECK(tuner::choose_config(bwd, leaderboard, sm90, nullptr, nullptr).source == "default (no tuned cache)");
  // Not on sm_80, not for f32, head_dim 80 or a grid of fewer than 264 blocks, nor the backward at head_dim 128.
  for (const Family* f : {&fwd, &bwd}) {
    CHECK(default_on(*f, leaderboard, sm80) == f->default_config(leaderboard));
    for (const Problem& p : {problem("f32", 64, 1, 16384), problem("bf16", 80, 1, 16384), problem("bf16", 64, 1, 2048)})
      CHECK(default_on(*f, p, sm90) == f->default_config(p));
  }
  CHECK(default_on(bwd, problem("bf16", 128, 1, 16384), sm90) == bwd.default_config(problem("bf16", 128, 1, 16384)));
}

TEST_CASE("the f32 attention backward's default, over an sm_89 block's shared memory, gives way to the config one "
          "step from it that fits",
          "[templates][default]") {
  const Family& f = find_family("attention_bwd");
  const Problem p{"f32", {{"batch", 1}, {"heads", 2}, {"seq", 37}, {"head_dim", 64}, {"causal", 1}}};
  const auto sm89 = DeviceLimits::for_arch("sm_89");
  const Config def = f.default_config(p);
  REQUIRE(f.is_valid(def, p, DeviceLimits::for_arch("sm_80")));
  REQUIRE_FALSE(f.is_valid(def, p, sm89));  // 120 KB of shared memory; an sm_89 block may use 99
  const Config c = default_on(f, p, sm89);
  CHECK(f.is_valid(c, p, sm89));
  // One parameter changed, by one step of its domain: 64-query tiles become 32-query tiles.
  Config expected = def;
  expected.set("block_m", def.at("block_m") / 2);
  CHECK(c == expected);
  const auto chosen = tuner::choose_config(f, p, sm89, nullptr, nullptr);
  CHECK(chosen.config == c);
  CHECK(chosen.source == "the valid config nearest the default on sm_89 (no tuned cache)");
  CHECK(tuner::choose_config(f, p, DeviceLimits::for_arch("sm_80"), nullptr, nullptr).source ==
        "default (no tuned cache)");
  // A problem no config fits says so.
  DeviceLimits tiny = sm89;
  tiny.max_smem_per_block = 1024;
  CHECK_THROWS_WITH(default_on(f, p, tiny), Catch::Contains("no config of the space is valid for") &&
                                                Catch::Contains("(the default {") && Catch::Contains("shared memory"));
}

}  // namespace tuner_session_default_on_test
