#include "model/safetensors.hpp"

#include <catch2/catch.hpp>
#include <cstring>

#include "base/error.hpp"
#include "base/files.hpp"
#include "model/weights.hpp"
#include "support.hpp"

namespace model_safetensors_test {

using namespace ktune::model;

namespace {

SafeTensor f32(std::vector<std::int64_t> shape, const std::vector<float>& values) {
  SafeTensor t;
  t.dtype = "F32";
  t.shape = std::move(shape);
  t.bytes.assign(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  return t;
}

}  // namespace

TEST_CASE("safetensors round-trips and its header follows the format", "[model][safetensors]") {
  TensorFile f;
  f.metadata["format"] = "pt";
  f.add("b", f32({2}, {1.5f, -2}));
  f.add("a", f32({1, 3}, {1, 2, 3}));
  const std::string bytes = serialize_safetensors(f);
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);  // little-endian host
  CHECK((8 + n) % 8 == 0);
  CHECK(bytes.substr(8, n).find(R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})") != std::string::npos);
  const TensorFile g = parse_safetensors(bytes, "mem");
  CHECK(g.order == std::vector<std::string>{"b", "a"});
  CHECK(g.at("a").shape == std::vector<std::int64_t>{1, 3});
  CHECK(tensor_values(g.at("b"), "b") == std::vector<double>{1.5, -2});
  CHECK(g.metadata.at("format") == "pt");
  CHECK(serialize_safetensors(g) == bytes);
}

TEST_CASE("malformed safetensors files give one clear error", "[model][safetensors]") {
  CHECK_THROWS_WITH(parse_safetensors("abc", "x.st"), Catch::Contains("x.st is not a valid safetensors file"));
  std::string bytes = serialize_safetensors([] {
    TensorFile f;
    f.add("w", f32({2}, {1, 2}));
    return f;
  }());
  CHECK_THROWS_WITH(parse_safetensors(bytes.substr(0, bytes.size() - 1), "cut.st"),
                    Catch::Contains("outside the data"));
}

TEST_CASE("model weights save, load, and name what is missing or misshapen", "[model][safetensors]") {
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

}  // namespace model_safetensors_test
