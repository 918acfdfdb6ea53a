// wgmma.cuh's GPU half through NVRTC (no device needed): the probe kernels of
// tuner/wgmma_probe.hpp, every N and both forms, compile and assemble for
// sm_90a, the one target that has wgmma, and a kernel including it for
// another target fails to compile saying so. ptxas waits for D on its own
// only in the kernels that read D before their wait.
#include <catch2/catch.hpp>

#include <sstream>
#include <string>

#include "templates/embedded.hpp"
#include "templates/family.hpp"
#include "tuner/compile/compiler.hpp"
#include "tuner/wgmma_probe.hpp"

namespace tuner_compile_wgmma_compile_test {

namespace wgmma = ktune::test::wgmma;

ktune::templates::Rendered probe() {
  ktune::templates::Rendered r;
  r.source = "// probe\n" + ktune::templates::expand_includes("common/wgmma.cuh") + wgmma::kSource;
  r.kernels = wgmma::kernels();
  return r;
}

TEST_CASE("wgmma's probe kernels compile for sm_90a without spilling", "[cpu]") {
  const ktune::tuner::CompileResult c = ktune::tuner::Compiler(false).compile(probe(), "sm_90a");
  INFO(c.log);
  REQUIRE(c.ok);
  std::string injected;  // ptxas' lines about waits it added (C7517)
  std::istringstream log(c.log);
  for (std::string line; std::getline(log, line);)
    if (line.find("C7517") != std::string::npos) injected += line + "\n";
  REQUIRE(c.kernels.size() == wgmma::kernels().size());
  for (const auto& k : c.kernels) {
    INFO(k.name_expression);
    CHECK(k.spill_bytes() == 0);
    // ptxas keeps the products asynchronous: it waits on its own (C7517) only
    // where a kernel reads D before its wait, and serialises none.
    const bool reads_early = k.name_expression.rfind("k_wgmma_unwaited", 0) == 0;
    CHECK((injected.find("'" + k.lowered_name + "'") != std::string::npos) == reads_early);
  }
  CHECK(c.log.find("serialized") == std::string::npos);
}

TEST_CASE("wgmma.cuh refuses a target without wgmma", "[cpu]") {
  const ktune::tuner::CompileResult c = ktune::tuner::Compiler(false).compile(probe(), "sm_90");
  CHECK_FALSE(c.ok);
  CHECK_THAT(c.log, Catch::Contains("wgmma.cuh needs the arch-specific target sm_90a"));
}

}  // namespace tuner_compile_wgmma_compile_test
