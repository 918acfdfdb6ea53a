// bench precision's kernels compile with NVRTC (no GPU needed) for sm_80 and
// sm_90, each of the five sum and addend dtypes, without spilling.
#include <catch2/catch.hpp>

#include "tuner/bench/precision_bench.hpp"
#include "tuner/compile/compiler.hpp"

namespace tuner_bench_precision_compile_test {

using namespace ktune;

TEST_CASE("bench precision's kernels compile with NVRTC for sm_80 and sm_90, each dtype pair, no spill",
          "[bench][compile]") {
  const tuner::Compiler compiler(false);
  const auto source = tuner::precision_source();
  REQUIRE(source.kernels.size() == tuner::precision_cases().size());
  for (const char* arch : {"sm_80", "sm_90"}) {
    const auto r = compiler.compile(source, arch);
    INFO(arch << ": " << r.log);
    REQUIRE(r.ok);
    REQUIRE(r.kernels.size() == source.kernels.size());
    for (const auto& k : r.kernels) {
      INFO(k.name_expression);
      CHECK(k.spill_bytes() == 0);
      CHECK(k.registers > 0);
    }
  }
}

}  // namespace tuner_bench_precision_compile_test
