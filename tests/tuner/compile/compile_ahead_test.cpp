#include "tuner/compile/compile_ahead.hpp"

#include <cstdlib>

#include <catch2/catch.hpp>

#include "support.hpp"
#include "tuner/compile/compiler.hpp"

namespace tuner_compile_compile_ahead_test {

using namespace ktune;
using namespace ktune::tuner;

TEST_CASE("compiling ahead fills the binary cache the runner reads, each config once", "[compile]") {
  const auto& family = templates::find_family("adamw_single");
  const auto problem = family.problem_classes().front();
  std::vector<Config> configs = {Config({{"threads", 128}, {"vec", 1}}), Config({{"threads", 512}, {"vec", 2}})};
  // A cache of its own, so the hits below come from compiling ahead.
  const auto dir = test::scratch_dir("ahead");
  ::setenv("KTUNE_CACHE_DIR", dir.c_str(), 1);
  {
    CompileAhead ahead(family, problem, "sm_80", 2);
    ahead.add({configs[0]});
    ahead.add(configs);  // configs[0] again: queued once
    CHECK(ahead.queued() == 2);
    ahead.wait();
  }
  const Compiler compiler;  // the same cache directory
  for (const auto& c : configs) CHECK(compiler.compile(family.render(c, problem), "sm_80").cache_hit);
}

}  // namespace tuner_compile_compile_ahead_test
