// A config of an attention family compiled with NVRTC for one arch, every
// kernel checked for spills (family_test.cpp and backward_test.cpp).
#pragma once
#include <catch2/catch.hpp>

#include "templates/family.hpp"
#include "tuner/compile/compiler.hpp"

namespace ktune::test {

/// Renders `config` of `family` for `problem`, compiles it for `arch` and
/// checks that it builds and that no kernel spills to local memory.
inline void check_compiles_without_spill(const tuner::Compiler& compiler, const templates::Family& family,
                                         const Config& config, const templates::Problem& problem, const char* arch) {
  INFO(family.name() << " " << problem.key() << " " << config.str() << " " << arch);
  const auto r = compiler.compile(family.render(config, problem), arch);
  INFO(r.log);
  REQUIRE(r.ok);
  for (const auto& k : r.kernels) {
    INFO(k.name_expression << ": " << k.registers << " registers");
    CHECK(k.spill_bytes() == 0);
  }
}

}  // namespace ktune::test
