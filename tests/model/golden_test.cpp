// Matches the cpu backend against PyTorch through the committed fixture of
// tests/model/make_golden.py (weights in safetensors; tokens, loss and
// gradient norms in JSON). Needs no torch at test time.
#include <catch2/catch.hpp>
#include <cmath>
#include <nlohmann/json.hpp>

#include "base/files.hpp"
#include "model/transformer.hpp"
#include "model/weights.hpp"

namespace model_golden_test {

using namespace ktune::model;

namespace {

template <class T>
void check_against_golden(double tolerance) {
  const std::filesystem::path dir = std::filesystem::path(KTUNE_SOURCE_DIR) / "tests" / "model" / "golden";
  const auto golden = nlohmann::json::parse(ktune::read_file(dir / "tiny.json"));
  const RunShape shape{golden.at("batch_size").get<std::int64_t>(), golden.at("context_length").get<std::int64_t>()};
  Transformer<T> m(model_config(golden.at("model").get<std::string>()), shape, Allocation::kTrain, 2);
  load_weights(m, dir / "tiny.safetensors");
  const auto tokens = golden.at("tokens").get<std::vector<std::int32_t>>();
  const auto targets = golden.at("targets").get<std::vector<std::int32_t>>();
  const double loss = m.forward(tokens, targets);
  const double want = golden.at("loss").get<double>();
  INFO("loss " << loss << " vs PyTorch " << want);
  CHECK(std::abs(loss - want) / want < tolerance);
  m.backward();
  const auto& norms = golden.at("grad_norms");
  REQUIRE(norms.size() == m.layout().tensors.size());
  for (const auto& info : m.layout().tensors) {
    double sq = 0;
    for (T g : m.gradient(info.name)) sq += static_cast<double>(g) * static_cast<double>(g);
    const double ref = norms.at(info.name).template get<double>();
    INFO(info.name << ": " << std::sqrt(sq) << " vs PyTorch " << ref);
    CHECK(std::abs(std::sqrt(sq) - ref) / ref < tolerance);
  }
}

}  // namespace

TEST_CASE("fp32 loss and gradient norms match PyTorch's (rel. error < 1e-4)", "[model][golden]") {
  check_against_golden<float>(1e-4);
}

TEST_CASE("fp64 loss and gradient norms match PyTorch's float64 (rel. error < 1e-9)", "[model][golden]") {
  check_against_golden<double>(1e-9);
}

}  // namespace model_golden_test
