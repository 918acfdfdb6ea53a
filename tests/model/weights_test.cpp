#include "model/weights.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>

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
  CHECK_THROWS_WITH(load_weights(b, missing, "m.st"),
                    Catch::Contains("m.st has no tensor 'layers.0.attn.k_proj.weight'"));
  TensorFile wrapped;  // torch.compile's state dict: every name under '_orig_mod.'
  for (const auto& name : file.order) wrapped.add("_orig_mod." + name, file.at(name));
  CHECK_THROWS_WITH(load_weights(b, wrapped, "c.st"),
                    Catch::Contains("c.st has no tensor 'token_embeddings.weight'") &&
                        Catch::Contains("it holds '_orig_mod.token_embeddings.weight'") &&
                        Catch::Contains("strip '_orig_mod.' from its names"));
  TensorFile reshaped = file;
  reshaped.tensors["ln_final.weight"].shape = {8, 8};
  CHECK_THROWS_WITH(load_weights(b, reshaped, "r.st"),
                    Catch::Contains("'ln_final.weight' in r.st has shape [8, 8], model tiny expects [64]"));
  TensorFile retyped = file;
  retyped.tensors["ln_final.weight"].dtype = "I32";
  CHECK_THROWS_WITH(load_weights(b, retyped, "t.st"),
                    Catch::Contains("is I32; weights are read from F32, F64, BF16 or F16") &&
                        Catch::Contains("v.float()"));
  CHECK_THROWS_AS(load_weights(b, dir / "absent.safetensors"), ktune::Error);
  // Read from disk a tensor at a time, a file is refused as it is whole.
  std::erase(missing.order, "layers.0.attn.k_proj.weight");
  write_safetensors(dir / "m.st", missing);
  CHECK_THROWS_WITH(load_weights(b, dir / "m.st"), Catch::Contains("has no tensor 'layers.0.attn.k_proj.weight'"));
  write_safetensors(dir / "r.st", reshaped);
  CHECK_THROWS_WITH(load_weights(b, dir / "r.st"), Catch::Contains("has shape [8, 8], model tiny expects [64]"));
}

TEST_CASE("BF16 and F16 weights (a half-precision PyTorch state dict) are read as the values they hold",
          "[model][weights]") {
  const RunShape shape{1, 4};
  Transformer<float> tiny(model_config("tiny"), shape, Allocation::kForwardOnly, 1);
  tiny.init_parameters(3);
  Transformer<float> b(model_config("tiny"), shape, Allocation::kForwardOnly, 1);
  // Bit patterns and their values: normal, negative, subnormal, the largest and negative zero.
  const std::vector<std::pair<std::uint16_t, float>> f16 = {
      {0x3c00, 1.0f}, {0xc000, -2.0f}, {0x3555, 0.333251953125f}, {0x0001, 0x1p-24f}, {0x03ff, 1023 * 0x1p-24f},
      {0x0400, 0x1p-14f}, {0x7bff, 65504.0f}, {0x8000, -0.0f}};
  const std::vector<std::pair<std::uint16_t, float>> bf16 = {
      {0x3f80, 1.0f}, {0xc0a0, -5.0f}, {0x3eab, 0.333984375f}, {0x0001, 0x1p-133f}, {0x7f7f, 0x1.fep127f},
      {0x0080, 0x1p-126f}, {0xbc00, -0.0078125f}, {0x8000, -0.0f}};
  for (const auto& [dtype, table] : {std::pair{"F16", f16}, std::pair{"BF16", bf16}}) {
    INFO(dtype);
    TensorFile file = weights_file(tiny);
    SafeTensor& norm = file.tensors.at("ln_final.weight");  // 64 values: the table, 8 times
    norm.dtype = dtype;
    norm.bytes.assign(64 * 2, '\0');
    for (std::size_t i = 0; i < 64; ++i) std::memcpy(norm.bytes.data() + 2 * i, &table[i % 8].first, 2);
    load_weights(b, file, "half.st");
    for (std::size_t i = 0; i < 64; ++i) {
      const float v = b.parameters()[b.layout().ln_final + static_cast<std::int64_t>(i)];
      CHECK(v == table[i % 8].second);
      CHECK(std::signbit(v) == std::signbit(table[i % 8].second));
    }
    // Inf and NaN are refused, as in F32.
    const std::uint16_t inf = std::string(dtype) == "F16" ? 0xfc00 : 0xff80;
    std::memcpy(norm.bytes.data() + 6, &inf, 2);
    CHECK_THROWS_WITH(load_weights(b, file, "half.st"), Catch::Contains("holds -inf at index 3"));
  }
}

TEST_CASE("weights of a model of another shape, or that are not finite, are refused, not read in part",
          "[model][weights]") {
  const RunShape shape{1, 4};
  ModelConfig three = model_config("tiny");
  three.layers = 3;
  Transformer<float> deeper(three, shape, Allocation::kForwardOnly, 1);
  deeper.init_parameters(1);
  Transformer<float> b(model_config("tiny"), shape, Allocation::kForwardOnly, 1);
  // A block the model has not: 3 blocks' weights into a 2-block model.
  TensorFile file = weights_file(deeper);
  CHECK_THROWS_WITH(load_weights(b, file, "w3.st"),
                    Catch::Contains("w3.st") && Catch::Contains("num_layers 3") && Catch::Contains("has 2"));
  file.metadata.clear();  // as a file another tool wrote, stating no sizes
  CHECK_THROWS_WITH(load_weights(b, file, "w3.st"),
                    Catch::Contains("holds tensor 'layers.2.") &&
                        Catch::Contains("(its tensors are a model of --vocab 128 --d-model 64 --d-ff 192 --layers 3: "
                                        "give those, and --heads, which no shape tells)"));
  // So are the sizes of a model of fewer blocks, or of another width, where the metadata states none.
  TensorFile two = weights_file(b);
  two.metadata.clear();
  CHECK_THROWS_WITH(load_weights(deeper, two, "w2.st"),
                    Catch::Contains("has no tensor 'layers.2.") && Catch::Contains("--d-ff 192 --layers 2:"));
  ModelConfig wide = model_config("tiny");
  wide.d_model = 96;
  wide.d_ff = 256;
  wide.vocab = 1000;
  Transformer<float> wider(wide, shape, Allocation::kForwardOnly, 1);
  TensorFile other_width = weights_file(wider);
  other_width.metadata.clear();
  CHECK_THROWS_WITH(load_weights(b, other_width, "w96.st"),
                    Catch::Contains("has shape [1000, 96], model tiny expects [128, 64]") &&
                        Catch::Contains("--vocab 1000 --d-model 96 --d-ff 256 --layers 2:"));
  // The same tensors, another head count: only the metadata tells.
  ModelConfig two_heads = model_config("tiny");
  two_heads.heads = 2;
  Transformer<float> other(two_heads, shape, Allocation::kForwardOnly, 1);
  other.init_parameters(1);
  CHECK_THROWS_WITH(load_weights(b, weights_file(other), "h2.st"), Catch::Contains("num_heads 2"));
  // NaN or Inf anywhere.
  Transformer<float> tiny(model_config("tiny"), shape, Allocation::kForwardOnly, 1);
  tiny.init_parameters(1);
  TensorFile bad = weights_file(tiny);
  const float nan = -std::numeric_limits<float>::quiet_NaN();  // printf's "-nan"
  std::memcpy(bad.tensors.at("lm_head.weight").bytes.data() + 8, &nan, sizeof nan);
  CHECK_THROWS_WITH(load_weights(b, bad, "nan.st"),
                    Catch::Contains("'lm_head.weight' in nan.st holds NaN at index 2"));
  const float inf = -std::numeric_limits<float>::infinity();
  std::memcpy(bad.tensors.at("lm_head.weight").bytes.data() + 8, &inf, sizeof inf);
  CHECK_THROWS_WITH(load_weights(b, bad, "inf.st"), Catch::Contains("holds -inf at index 2"));
  // A finite F64 value past float's range: an infinity in the f32 model.
  TensorFile wide_values = weights_file(tiny);
  SafeTensor& head = wide_values.tensors.at("lm_head.weight");
  std::vector<double> doubles(head.bytes.size() / sizeof(float), 0.01);
  doubles[2] = 1e300;
  head.dtype = "F64";
  head.bytes.assign(reinterpret_cast<const char*>(doubles.data()), doubles.size() * sizeof(double));
  CHECK_THROWS_WITH(load_weights(b, wide_values, "f64.st"),
                    Catch::Contains("holds 1e+300 at index 2: corrupt weights (past the model's float range)"));
  // What a saved batch or a checkpoint carries beside the weights is no block: read as before.
  TensorFile extra = weights_file(tiny);
  extra.add("tokens", extra.at("ln_final.weight"));
  extra.add("optimizer.exp_avg.ln_final.weight", extra.at("ln_final.weight"));
  load_weights(b, extra, "extra.st");
  CHECK(std::equal(tiny.parameters().begin(), tiny.parameters().end(), b.parameters().begin()));
}

TEST_CASE("a weights file's metadata may write its numbers otherwise, as Python's str(float) does",
          "[model][weights]") {
  const RunShape shape{1, 4};
  Transformer<float> tiny(model_config("tiny"), shape, Allocation::kForwardOnly, 1);
  tiny.init_parameters(3);
  Transformer<float> b(model_config("tiny"), shape, Allocation::kForwardOnly, 1);
  for (const char* theta : {"10000.0", "1e4", "10000"}) {
    INFO(theta);
    TensorFile file = weights_file(tiny);
    file.metadata["rope_theta"] = theta;
    file.metadata["d_model"] = "64.0";
    CHECK_FALSE(differing_size(file.metadata, model_config("tiny"), /*absent_differs=*/true));
    std::fill(b.parameters().begin(), b.parameters().end(), std::numeric_limits<float>::quiet_NaN());
    load_weights(b, file, "theta.st");
    CHECK(std::equal(tiny.parameters().begin(), tiny.parameters().end(), b.parameters().begin()));
  }
  // Another value is another model's, however it is written.
  for (const char* theta : {"500000.0", "10000.5", "ten thousand"}) {
    TensorFile file = weights_file(tiny);
    file.metadata["rope_theta"] = theta;
    CHECK(differing_size(file.metadata, model_config("tiny"), /*absent_differs=*/false) == "rope_theta");
    CHECK_THROWS_WITH(load_weights(b, file, "theta.st"), Catch::Contains(std::string("rope_theta ") + theta));
  }
}

}  // namespace model_weights_test
