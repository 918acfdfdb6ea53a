#include "tuner/compile/compile_ahead.hpp"

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <thread>

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
  const test::ScopedEnv cache_dir("KTUNE_CACHE_DIR", dir.c_str());
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

TEST_CASE("compiling ahead stops at the first compile the binary cache does not keep", "[compile]") {
  // The runner would not find what it compiles: it compiles everything itself, and the CPU is its.
  const auto& family = templates::find_family("adamw_single");
  const auto problem = family.problem_classes().front();
  const auto dir = test::scratch_dir("ahead-unwritable");
  std::ofstream(dir / "cubin") << "a file where the cache's folder would be";
  const test::ScopedEnv cache_dir("KTUNE_CACHE_DIR", dir.c_str());
  std::vector<Config> configs;
  for (const int threads : {128, 256, 512})
    for (const int vec : {1, 2, 4}) configs.push_back(Config({{"threads", threads}, {"vec", vec}}));
  CompileAhead ahead(family, problem, "sm_80", 1);
  ahead.add(configs);
  // It ends after its first compile; one that went on would compile the nine and wait for more.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (ahead.compiling() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK_FALSE(ahead.compiling());
}

}  // namespace tuner_compile_compile_ahead_test
