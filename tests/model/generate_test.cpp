// Generation (CS336's decoding) on the cpu backend: the sampler draws the
// argmax at temperature 0 and otherwise from the tempered softmax cut to its
// top-p nucleus, in the proportions it says; a model trained on the
// synthetic stream continues the stream's sequence greedily, past its
// context (the window slides), and stops at the end-of-sequence token.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <map>
#include <random>

#include "base/error.hpp"
#include "model/data.hpp"
#include "model/tiny_run.hpp"
#include "model/train.hpp"
#include "support.hpp"

namespace model_generate_test {

using namespace ktune;
using namespace ktune::model;

namespace {

// How often each token is drawn in n draws.
std::map<std::int32_t, double> frequencies(const std::vector<float>& logits, double temperature, double top_p,
                                           int n) {
  std::mt19937_64 rng(1);
  std::map<std::int32_t, double> f;
  for (int i = 0; i < n; ++i) f[sample_token(logits, temperature, top_p, rng)] += 1.0 / n;
  return f;
}

}  // namespace

TEST_CASE("sample_token: the argmax at temperature 0, else the tempered softmax's proportions within its nucleus",
          "[model][generate]") {
  std::mt19937_64 rng(0);
  CHECK(sample_token(std::vector<float>{0.5f, 3.0f, -1.0f, 3.0f}, 0, 1, rng) == 1);  // the first of equal ones
  // p = softmax(log {0.5, 0.3, 0.15, 0.05}) at temperature 1: those probabilities.
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  const int n = 40000;  // a frequency's standard error is at most 0.0025
  auto f = frequencies(logits, 1, 1, n);
  CHECK(f[0] == Approx(0.5).margin(0.015));
  CHECK(f[1] == Approx(0.3).margin(0.015));
  CHECK(f[2] == Approx(0.15).margin(0.015));
  CHECK(f[3] == Approx(0.05).margin(0.015));
  // Temperature 0.5 squares the odds: 25 : 9 : 2.25 : 0.25 of 36.5.
  f = frequencies(logits, 0.5, 1, n);
  CHECK(f[0] == Approx(25 / 36.5).margin(0.015));
  CHECK(f[3] == Approx(0.25 / 36.5).margin(0.005));
  // top-p 0.8: the nucleus is {0, 1} (0.5 + 0.3), renormalised 5 : 3.
  f = frequencies(logits, 1, 0.8, n);
  CHECK(f.size() == 2);
  CHECK(f[0] == Approx(0.625).margin(0.015));
  // top-p 0.5 keeps the likeliest alone, as does any top-p below its probability.
  CHECK(frequencies(logits, 1, 0.5, 1000).size() == 1);
  CHECK(frequencies(logits, 1, 0.01, 1000).at(0) == Approx(1.0));
  // A token whose probability underflows is never drawn, even at top-p 1.
  const std::vector<float> far = {0.0f, -1e6f, 1.0f};
  CHECK(frequencies(far, 1, 1, 4000).count(1) == 0);

  // An infinite logit (a forward that overflowed) takes all the probability, shared by the tokens at it.
  const float inf = std::numeric_limits<float>::infinity();
  f = frequencies({1.0f, inf, 2.0f, inf, -inf}, 1, 1, 4000);
  CHECK(f.size() == 2);
  CHECK(f[1] == Approx(0.5).margin(0.04));
  CHECK(f[3] == Approx(0.5).margin(0.04));
  f = frequencies({1.0f, inf, 2.0f}, 0.5, 0.3, 100);
  CHECK((f.size() == 1 && f.count(1) == 1));
  f = frequencies({-inf, -inf, -inf}, 1, 1, 3000);  // every logit -inf: all alike
  CHECK(f.size() == 3);
  for (const auto& [token, share] : f) CHECK(share == Approx(1.0 / 3).margin(0.04));

  CHECK_THROWS_WITH(sample_token(logits, -1, 1, rng), Catch::Contains("temperature -1"));
  CHECK_THROWS_WITH(sample_token(logits, 1, 0, rng), Catch::Contains("top-p 0"));
  CHECK_THROWS_WITH(sample_token(logits, 1, 1.5, rng), Catch::Contains("top-p 1.5"));
  try {
    sample_token(std::vector<float>{0.0f, std::numeric_limits<float>::quiet_NaN()}, 1, 1, rng);
    FAIL("NaN logits were sampled");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kCheckFailed);
  }
}

TEST_CASE("generate: a model trained on the synthetic stream continues its sequence greedily, past its context, "
          "and stops at the end-of-sequence token",
          "[model][generate]") {
  TrainOptions o = test::tiny_run(200);
  o.shape = RunShape{4, 32};
  o.save = (test::scratch_dir("generate") / "tiny.safetensors").string();
  const auto records = train(o);
  REQUIRE(records.back().loss < 0.1);  // it has learned the sequence
  // The stream the run trained on (train's synthetic stream for its seed), as one run of 150 tokens.
  const TokenStream stream = TokenStream::synthetic(o.model.vocab, o.seed + 1);
  std::mt19937_64 rng(5);
  std::vector<std::int32_t> run, next;
  stream.sample(RunShape{1, 150}, rng, run, next);

  GenerateOptions g;
  g.model = o.model;
  g.shape = RunShape{1, 32};
  g.threads = 2;
  g.weights = o.save;
  g.temperature = 0;
  for (const std::size_t prompt : {std::size_t{20}, std::size_t{50}}) {  // shorter and longer than the context
    INFO("prompt of " << prompt);
    g.prompt.assign(run.begin(), run.begin() + static_cast<std::ptrdiff_t>(prompt));
    g.max_tokens = 60;  // the sequence outgrows the context: the window slides
    std::vector<std::int32_t> seen;
    const auto drawn = generate(g, [&](std::int32_t t) { seen.push_back(t); });
    CHECK(drawn == seen);
    CHECK(drawn == std::vector<std::int32_t>(run.begin() + static_cast<std::ptrdiff_t>(prompt),
                                             run.begin() + static_cast<std::ptrdiff_t>(prompt) + 60));
  }
  // Stopping at the end-of-sequence token: the first time it is drawn, kept.
  g.prompt.assign(run.begin(), run.begin() + 20);
  g.eos = run[20 + 7];
  const auto stopped = generate(g);
  const auto first = std::find(run.begin() + 20, run.end(), *g.eos) - (run.begin() + 20);
  CHECK(static_cast<std::ptrdiff_t>(stopped.size()) == first + 1);
  CHECK(stopped.back() == *g.eos);
}

TEST_CASE("generate: the seed decides a sampled continuation, and bad requests are refused before any work",
          "[model][generate]") {
  GenerateOptions g;
  g.model = model_config("tiny");
  g.shape = RunShape{1, 16};
  g.prompt = {1, 2, 3};
  g.max_tokens = 12;
  g.seed = 4;
  const auto a = generate(g), b = generate(g);
  CHECK(a == b);
  CHECK(a.size() == 12);
  g.seed = 5;
  CHECK(generate(g) != a);

  GenerateOptions bad = g;
  bad.prompt.clear();
  CHECK_THROWS_WITH(generate(bad), Catch::Contains("an empty prompt"));
  bad = g;
  bad.prompt = {1, 128};
  CHECK_THROWS_WITH(generate(bad), Catch::Contains("prompt token 128 is outside the vocabulary [0, 128)"));
  bad = g;
  bad.max_tokens = 0;
  CHECK_THROWS_WITH(generate(bad), Catch::Contains("0 tokens to generate"));
  bad = g;
  bad.eos = 200;
  CHECK_THROWS_WITH(generate(bad), Catch::Contains("end-of-sequence token 200"));
  bad = g;
  bad.top_p = 0;
  CHECK_THROWS_WITH(generate(bad), Catch::Contains("top-p 0"));
}

}  // namespace model_generate_test
