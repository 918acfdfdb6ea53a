#include "model/weights.hpp"

#include <catch2/catch.hpp>

#include "base/error.hpp"
#include "support.hpp"

namespace model_weights_test {

using namespace ktune;
using namespace ktune::model;

TEST_CASE("model weights save, load, and name what is missing or misshapen", "[model][weights]") {
  const auto dir = ktune::test::scratch_dir("weights");
  const RunShape shape{1, 4};
  Transformer<float> a(model_config("tiny"), shape, Allocation::kForwardOnly, 1);
  a.init_parameters(42);
  save_weights(a, dir / "w.safetensors");
  Transformer<float> b(model_config("tiny"), shape, Allocation::kForwardOnly, 1);
  load_weights(b, dir / "w.safetensors");
  CHECK(std::equal(a.parameters().begin(), a.parameters().end(), b.parameters().begin()));
  const TensorFile file = read_safetensors(dir / "w.safetensors");
  CHECK(file.order.front() == "token_embeddings.weight");
  CHECK(file.at("layers.1.ffn.w2.weight").shape == std::vector<std::int64_t>{64, 192});
  CHECK(file.at("lm_head.weight").shape == std::vector<std::int64_t>{128, 64});

  TensorFile missing = file;
  missing.tensors.erase("layers.0.attn.k_proj.weight");
  CHECK_THROWS_WITH(load_weights(b, missing, "m.st"), Catch::Contains("m.st has no tensor 'layers.0.attn.k_proj.weight'"));
  TensorFile reshaped = file;
  reshaped.tensors["ln_final.weight"].shape = {8, 8};
  CHECK_THROWS_WITH(load_weights(b, reshaped, "r.st"),
                    Catch::Contains("'ln_final.weight' in r.st has shape [8, 8], model tiny expects [64]"));
  TensorFile retyped = file;
  retyped.tensors["ln_final.weight"].dtype = "BF16";
  CHECK_THROWS_WITH(load_weights(b, retyped, "t.st"), Catch::Contains("is BF16; only F32 and F64"));
  CHECK_THROWS_AS(load_weights(b, dir / "absent.safetensors"), ktune::Error);
}

}  // namespace model_weights_test
