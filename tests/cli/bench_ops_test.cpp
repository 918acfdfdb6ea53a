// `ktune bench ops` without a device: one line and exit 2, nothing written;
// bad input named with what is accepted, before any device is asked for.
#include <catch2/catch.hpp>
#include <filesystem>

#include "support.hpp"

namespace cli_bench_ops_test {

using ktune::test::ktune_exe;
using ktune::test::run_command;

TEST_CASE("CLI: bench ops needs a GPU and says so in one line", "[cli]") {
  std::string out;
  const auto dir = ktune::test::scratch_dir("bench_ops");
  const auto json = (dir / "ops.json").string();
  CHECK(run_command("KTUNE_NO_DEVICE=1 " + ktune_exe().string() + " bench ops --json-out " + json, &out) == 2);
  CHECK_THAT(out, Catch::Contains("no CUDA device: "));
  CHECK_FALSE(std::filesystem::exists(json));
  CHECK(run_command(ktune_exe().string() + " bench ops --families attention_fwd", &out) == 2);
  CHECK_THAT(out, Catch::Contains("no eager decomposition") && Catch::Contains("rmsnorm_fwd"));
  CHECK(run_command(ktune_exe().string() + " bench ops --model huge", &out) == 2);
  CHECK(run_command(ktune_exe().string() + " bench ops --dtype f16", &out) == 2);
  CHECK_THAT(out, Catch::Contains("f32 or bf16"));
}

}  // namespace cli_bench_ops_test
