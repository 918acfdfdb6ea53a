// `ktune eval` and `ktune generate` with a tuned cache on the emulation: the
// entries the run passes over (another kernel source, a config off the
// family's space) are warned of, and where each kernel's config came from is
// counted, as train and bench e2e do.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include "cache/store.hpp"
#include "support.hpp"
#include "templates/family.hpp"
#include "tuner/exec/backend.hpp"
#include "tuner/session/tuned_kernels.hpp"

namespace cli_eval_emu_test {

using namespace ktune;
using ktune::test::ktune_exe;
using ktune::test::run_command;

using ktune::test::occurrences;

TEST_CASE("CLI: eval and generate with a tuned cache warn of the entries they pass over and count the kernels' "
          "configs",
          "[cli]") {
  const auto dir = ktune::test::scratch_dir("cli-eval-cache");
  const auto file = dir / "tuned.json";
  const auto device = tuner::exec::make_emu_backend()->device();
  // The tiny model over 16 tokens (eval: ctx 16, batch 1; generate: 16 tokens in all) of d_model 64, vocab 128.
  const auto& norm = templates::find_family("rmsnorm_fwd");
  const auto& embed = templates::find_family("embedding_fwd");
  const templates::Problem norm_problem{"f32", {{"rows", 16}, {"dim", 64}}};
  const templates::Problem embed_problem{"f32", {{"rows", 16}, {"dim", 64}, {"vocab", 128}}};
  cache::Entry stale;
  stale.key = tuner::cache_key(norm, norm_problem, device);
  stale.key.source_hash = "0123456789abcdef0123456789abcdef";  // tuned on another kernel source
  stale.config = norm.default_config(norm_problem).to_json();
  stale.time_ms = stale.p20_ms = stale.p80_ms = 1;
  stale.repetitions = 1;
  cache::Entry edited = stale;
  edited.key = tuner::cache_key(embed, embed_problem, device);
  edited.config = embed.default_config(embed_problem).to_json();
  edited.config["threads"] = 7;  // an edited file: no such block size in the space
  cache::CacheFile(file).put(stale);
  cache::CacheFile(file).put(edited);

  const std::string model = " --backend emu --cache " + file.string() + " --model tiny --ctx 16 --threads 2";
  std::string out;
  REQUIRE(run_command(ktune_exe().string() + " eval --batch 1" + model, &out) == 0);
  INFO(out);
  CHECK_THAT(out, Catch::Contains("warning: ignoring stale cache entry for rmsnorm_fwd " + norm_problem.key()) &&
                      Catch::Contains("warning: ignoring the tuned entry for embedding_fwd " + embed_problem.key()) &&
                      Catch::Contains("kernels: 0 exact, 0 nearest,"));
  CHECK(occurrences(out, "warning: ") == 2);  // each once: at the start, none again as the run ends
  REQUIRE(run_command(ktune_exe().string() + " --json eval --batch 2" + model + " 2>/dev/null", &out) == 0);
  CHECK(nlohmann::json::parse(out).at("kernels").get<std::string>().find("0 exact, 0 nearest,") != std::string::npos);

  // generate reads the prompt and the tokens it draws, but the last: 16.
  REQUIRE(run_command(ktune_exe().string() + " generate --prompt 1 2 3 4 5 6 7 8 9 10 11 12 13 14 --max-tokens 3" +
                          model,
                      &out) == 0);
  INFO(out);
  CHECK_THAT(out, Catch::Contains("warning: ignoring stale cache entry for rmsnorm_fwd " + norm_problem.key()) &&
                      Catch::Contains("warning: ignoring the tuned entry for embedding_fwd " + embed_problem.key()) &&
                      Catch::Contains("kernels: 0 exact, 0 nearest,"));
  CHECK(occurrences(out, "warning: ") == 2);
  // train says them as it starts, and the new ones a step finds after its step (a GPU's GEMMs'): none here.
  REQUIRE(run_command(ktune_exe().string() + " train --batch 1 --steps 2" + model, &out) == 0);
  CHECK_THAT(out, Catch::Contains("warning: ignoring stale cache entry for rmsnorm_fwd " + norm_problem.key()));
  CHECK(occurrences(out, "warning: ") == 2);
}

}  // namespace cli_eval_emu_test
