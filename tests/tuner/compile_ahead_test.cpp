#include "tuner/compile_ahead.hpp"

#include <catch2/catch.hpp>

#include "support.hpp"

using namespace ktune;
using namespace ktune::tuner;

TEST_CASE("compiling ahead fills the binary cache the runner reads", "[compile]") {
  const auto& family = templates::find_family("adamw_single");
  const auto problem = family.problem_classes().front();
  std::vector<Config> configs = {Config({{"threads", 128}, {"vec", 1}}), Config({{"threads", 512}, {"vec", 2}})};
  {
    CompileAhead ahead(family, problem, configs, "sm_80", 2);
    ahead.wait();
    CHECK(ahead.compiled() == 2);
  }
  const Compiler compiler;  // the same default cache directory
  for (const auto& c : configs) CHECK(compiler.compile(family.render(c, problem), "sm_80").cache_hit);
}
