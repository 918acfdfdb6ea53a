// Checkpoints and the learning-rate schedule of the training loop on the cpu
// backend: a run stopped and resumed from its checkpoint is the run that was
// never stopped, to the bit.
#include "model/checkpoint.hpp"

#include <catch2/catch.hpp>
#include <cstring>
#include <fmt/format.h>

#include <cmath>
#include <numbers>

#include "base/error.hpp"
#include "base/safetensors.hpp"
#include "model/tiny_run.hpp"
#include "model/train.hpp"
#include "model/weights.hpp"
#include "support.hpp"

namespace model_checkpoint_test {

using namespace ktune;
using namespace ktune::model;

namespace {

TrainOptions tiny(std::int64_t steps) { return test::tiny_run(steps, 7); }

std::vector<float> saved_weights(const TrainOptions& o, const std::filesystem::path& path) {
  const ParameterLayout layout = parameter_layout(o.model);
  std::vector<float> params(static_cast<std::size_t>(layout.total));
  load_parameters<float>(o.model, layout, std::span<float>(params), read_safetensors(path), path.string());
  return params;
}

}  // namespace

TEST_CASE("a run resumed from its checkpoint takes the steps the uninterrupted run takes, to the bit",
          "[model][checkpoint]") {
  const auto dir = test::scratch_dir("checkpoint-resume");
  const bool cosine = GENERATE(false, true);
  INFO((cosine ? "cosine schedule, warmup 2" : "constant rate"));
  TrainOptions whole = tiny(6);
  if (cosine) whole.schedule = LrSchedule{true, 2, 3e-4f, 0};
  whole.save = (dir / "whole.safetensors").string();
  const auto straight = train(whole);

  TrainOptions first = whole;
  first.steps = 3;
  first.save = "";
  first.checkpoint = (dir / "run.ckpt").string();
  first.schedule.cycle = whole.steps;  // the schedule of the 6-step run: its cycle would default to 3 here
  const auto head = train(first);
  REQUIRE(head.size() == 3);
  CHECK(head.back().checkpointed);
  CHECK(read_checkpoint_info(first.checkpoint, whole.model).step == 3);

  TrainOptions rest = first;
  rest.steps = 6;
  rest.resume = true;
  rest.save = (dir / "resumed.safetensors").string();
  const auto tail = train(rest);
  REQUIRE(tail.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(head[i].loss == straight[i].loss);
    CHECK(tail[i].step == straight[i + 3].step);
    CHECK(tail[i].lr == straight[i + 3].lr);
    CHECK(tail[i].loss == straight[i + 3].loss);
  }
  CHECK(saved_weights(whole, rest.save) == saved_weights(whole, whole.save));
  // The checkpoint holds the weights under their state-dict names: it is a weights file too.
  CHECK(saved_weights(whole, rest.checkpoint) == saved_weights(whole, whole.save));
  const SafetensorsReader file(rest.checkpoint);
  CHECK(file.contains("optimizer.exp_avg.lm_head.weight"));
  CHECK(file.contains("optimizer.exp_avg_sq.layers.1.ffn.w2.weight"));
  CHECK(file.metadata().at("step") == "6");

  // Resumed at its last step, the run has nothing left to take.
  CHECK(train(rest).empty());
}

TEST_CASE("a run over micro-batches resumed from its checkpoint takes the uninterrupted run's steps, and the "
          "checkpoint records the shape its batches were drawn at",
          "[model][checkpoint][accumulate]") {
  const auto dir = test::scratch_dir("checkpoint-accumulate");
  TrainOptions whole = tiny(4);
  whole.shape = RunShape{2, 16, 2};
  const auto straight = train(whole);
  TrainOptions first = whole;
  first.steps = 2;
  first.checkpoint = (dir / "run.ckpt").string();
  train(first);
  const CheckpointInfo info = read_checkpoint_info(first.checkpoint, whole.model);
  CHECK(info.shape.batch == 2);
  CHECK(info.shape.context == 16);
  CHECK(info.shape.micro_batches == 2);
  TrainOptions rest = first;
  rest.steps = 4;
  rest.resume = true;
  const auto tail = train(rest);
  REQUIRE(tail.size() == 2);
  CHECK(tail[0].loss == straight[2].loss);
  CHECK(tail[1].loss == straight[3].loss);
}

TEST_CASE("checkpoints are written every so many steps, after the last, and where the run is asked to stop",
          "[model][checkpoint]") {
  const auto dir = test::scratch_dir("checkpoint-every");
  TrainOptions o = tiny(5);
  o.checkpoint = (dir / "c.ckpt").string();
  o.checkpoint_every = 2;
  std::vector<std::int64_t> written;
  train(o, [&](const StepRecord& r) {
    if (r.checkpointed) written.push_back(r.step);
  });
  CHECK(written == std::vector<std::int64_t>{2, 4, 5});

  o.checkpoint_every = 0;
  o.steps = 100;
  // Asked before a step's record goes out and after (a --metrics line that could not be written stops there).
  std::int64_t sent = 0;
  o.should_stop = [&] { return sent == 3; };
  const auto records = train(o, [&](const StepRecord& r) { sent = r.step; });
  REQUIRE(records.size() == 3);
  CHECK(records.back().checkpointed);
  CHECK(read_checkpoint_info(o.checkpoint, o.model).step == 3);
}

TEST_CASE("a diverged run stops at the first loss that is not finite and keeps its last checkpoint",
          "[model][checkpoint]") {
  const auto dir = test::scratch_dir("checkpoint-diverged");
  TrainOptions o = tiny(50);
  o.hyper.lr = 1e6f;  // the weights blow up within a few steps
  o.checkpoint = (dir / "c.ckpt").string();
  o.checkpoint_every = 1;
  std::vector<StepRecord> seen;
  try {
    train(o, [&](const StepRecord& r) { seen.push_back(r); });
    FAIL("a run at a rate of 1e6 took its 50 steps");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kCheckFailed);
    REQUIRE_FALSE(seen.empty());
    CHECK_THAT(e.what(), Catch::Contains(fmt::format("at step {}: training diverged", seen.back().step + 1)) &&
                             Catch::Contains(fmt::format("holds step {}", seen.back().step)));
  }
  for (const auto& r : seen) CHECK(std::isfinite(r.loss));
  CHECK(read_checkpoint_info(o.checkpoint, o.model).step == seen.back().step);
}

TEST_CASE("a run whose update makes the weights not finite while its loss stays finite keeps its last good checkpoint",
          "[model][checkpoint]") {
  // At a rate of 1e4 the output goes uniform (the loss ln 128, finite) as the
  // gradients overflow: with clipping the norm says so; without, only the
  // weights do, and a checkpoint or weights file must not keep them.
  for (const float clip : {1.0f, 0.0f}) {
    INFO("clip-norm " << clip);
    const auto dir = test::scratch_dir(fmt::format("checkpoint-nan-weights-{}", clip));
    TrainOptions o = tiny(30);
    o.hyper.lr = 1e4f;
    o.hyper.max_grad_norm = clip;
    o.checkpoint = (dir / "c.ckpt").string();
    o.checkpoint_every = 1;
    o.save = (dir / "w.safetensors").string();
    std::vector<StepRecord> seen;
    try {
      train(o, [&](const StepRecord& r) { seen.push_back(r); });
      FAIL("a run at a rate of 1e4 took its 30 steps");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::kCheckFailed);
      const auto kept = read_checkpoint_info(o.checkpoint, o.model).step;
      CHECK_THAT(e.what(), Catch::Contains(fmt::format("training diverged at step {}; {} holds step {}", kept + 1,
                                                       o.checkpoint, kept)) ||
                               Catch::Contains(fmt::format("at step {}: training diverged; {} holds step {}",
                                                           kept + 1, o.checkpoint, kept)));
      CHECK_THAT(e.what(), Catch::Contains(clip > 0 ? "the gradient norm is" : "the weights are not finite"));
      CHECK_THAT(e.what(), Catch::Contains(fmt::format("; --save {} is not written", o.save)) &&
                               !Catch::Contains(" -nan") && !Catch::Contains(" nan"));
    }
    for (const auto& r : seen) CHECK(std::isfinite(r.loss));
    CHECK_NOTHROW(saved_weights(o, o.checkpoint));  // reading refuses weights that are not finite
    CHECK_FALSE(std::filesystem::exists(o.save));
  }
}

TEST_CASE("a checkpoint of another model, seed or token stream, or a weights file, is refused with one line",
          "[model][checkpoint]") {
  const auto dir = test::scratch_dir("checkpoint-refused");
  TrainOptions o = tiny(2);
  o.checkpoint = (dir / "c.ckpt").string();
  o.save = (dir / "w.safetensors").string();
  train(o);

  TrainOptions other = o;
  other.resume = true;
  other.steps = 3;
  other.save = "";
  other.model.d_ff = 256;
  CHECK_THROWS_WITH(train(other), Catch::Contains("is a checkpoint of model tiny (d_model 64, d_ff 192") &&
                                      Catch::Contains("this run trains tiny (d_model 64, d_ff 256"));
  other = o;
  other.resume = true;
  other.steps = 3;
  other.seed = 8;
  CHECK_THROWS_WITH(train(other), Catch::Contains("was trained with seed 7; resume it with --seed 7"));
  other = o;
  other.resume = true;
  other.checkpoint = o.save;
  CHECK_THROWS_WITH(train(other), Catch::Contains("is not a ktune checkpoint"));

  // Another token stream: a restart that forgot --tokens, or another corpus. The same tokens moved are fine.
  const auto token_file = [&](const std::string& name, std::size_t n, std::size_t shift = 5) {
    std::vector<std::uint16_t> tokens(n);
    for (std::size_t i = 0; i < n; ++i) tokens[i] = static_cast<std::uint16_t>((i * 31 + shift) % 128);
    return ktune::test::write_tokens(dir / name, tokens).string();
  };
  other = o;
  other.resume = true;
  other.steps = 3;
  other.tokens_file = token_file("a.u16", 500);
  CHECK_THROWS_WITH(train(other), Catch::Contains("was trained on the synthetic stream; this run reads ") &&
                                      Catch::Contains("a.u16 (500 tokens)"));
  TrainOptions on_file = o;
  on_file.checkpoint = (dir / "f.ckpt").string();
  on_file.save = "";
  on_file.tokens_file = other.tokens_file;
  train(on_file);
  on_file.resume = true;
  on_file.steps = 3;
  on_file.tokens_file = "";
  CHECK_THROWS_WITH(train(on_file), Catch::Contains("a.u16 (500 tokens); this run reads the synthetic stream"));
  on_file.tokens_file = token_file("b.u16", 400);
  CHECK_THROWS_WITH(train(on_file), Catch::Contains("this run reads ") && Catch::Contains("b.u16 (400 tokens)"));
  on_file.tokens_file = token_file("c.u16", 500, 6);  // as many tokens, other ones
  CHECK_THROWS_WITH(train(on_file), Catch::Contains("was trained on as many tokens as ") &&
                                        Catch::Contains("c.u16 (500 tokens) holds, but other ones"));
  std::filesystem::copy_file(dir / "a.u16", dir / "moved.u16");
  on_file.tokens_file = (dir / "moved.u16").string();
  CHECK(train(on_file).size() == 1);

  // Metadata edited by hand: each malformed field is named.
  TensorFile file = read_safetensors(o.checkpoint);
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"step", "-1"}, {"step", "3x"}, {"seed", ""}, {"sampler", "not a state"}, {"ktune_checkpoint", "9"},
           {"context", "0"}, {"batch", "0"}, {"micro_batches", "0"}, {"context", "99999999999"},
           {"step", "9223372036854775807"}, {"step", "18446744073709551615"}}) {
    TensorFile edited = file;
    edited.metadata.erase("metadata_hash");  // as a checkpoint written before it was: its fields are read
    edited.metadata[key] = value;
    write_safetensors(dir / "edited.ckpt", edited);
    INFO(key << " = '" << value << "'");
    CHECK_THROWS_AS(read_checkpoint_info(dir / "edited.ckpt", o.model), Error);
  }
  TensorFile missing = file;
  missing.tensors.erase("optimizer.exp_avg.ln_final.weight");
  std::erase(missing.order, "optimizer.exp_avg.ln_final.weight");
  write_safetensors(dir / "missing.ckpt", missing);
  other = o;
  other.resume = true;
  other.steps = 3;
  other.checkpoint = (dir / "missing.ckpt").string();
  CHECK_THROWS_WITH(train(other), Catch::Contains("has no tensor 'optimizer.exp_avg.ln_final.weight'"));
  // A second moment below 0 (or any value not finite) is a corrupt file, not a run that diverges on it.
  TensorFile negative = file;
  const float below = -1.0f;
  std::memcpy(negative.tensors.at("optimizer.exp_avg_sq.ln_final.weight").bytes.data() + 4, &below, sizeof below);
  write_safetensors(dir / "negative.ckpt", negative);
  other.checkpoint = (dir / "negative.ckpt").string();
  CHECK_THROWS_WITH(train(other), Catch::Contains("'optimizer.exp_avg_sq.ln_final.weight'") &&
                                      Catch::Contains("holds -1 at index 1: a corrupt checkpoint"));
  // A value a disk or a copy changed that is still a plausible weight: the data's hash refuses it.
  TensorFile flipped = file;
  flipped.tensors.at("lm_head.weight").bytes[4001] ^= 0x21;
  write_safetensors(dir / "flipped.ckpt", flipped);
  other.checkpoint = (dir / "flipped.ckpt").string();
  CHECK_THROWS_WITH(train(other), (dir / "flipped.ckpt").string() +
                                      " is damaged: its tensors are not the bytes it was written with (a disk or a "
                                      "copy changed them); resume from an earlier checkpoint, or start anew");
  // A digit changed in the metadata (the step, the sampler's state): resumed, it would train at another step, on
  // other batches; the metadata's hash refuses it before anything is allocated.
  for (const char* key : {"step", "sampler"}) {
    TensorFile edited = file;
    std::string& text = edited.metadata.at(key);
    text.back() = text.back() == '1' ? '2' : '1';
    write_safetensors(dir / "edited.ckpt", edited);
    other.checkpoint = (dir / "edited.ckpt").string();
    INFO(key);
    CHECK_THROWS_WITH(train(other), (dir / "edited.ckpt").string() +
                                        " is damaged: its metadata (the step, the batch sampler's state, the run's "
                                        "settings) is not what it was written with (a disk or a copy changed it); "
                                        "resume from an earlier checkpoint, or start anew");
    CHECK_THROWS_WITH(read_checkpoint_info(other.checkpoint, o.model), Catch::Contains("is damaged"));
  }
  // The same file as written loads.
  write_safetensors(dir / "copied.ckpt", file);
  other.checkpoint = (dir / "copied.ckpt").string();
  CHECK_NOTHROW(train(other));
}

TEST_CASE("the learning-rate schedule warms up linearly and follows CS336's cosine", "[model][checkpoint]") {
  const LrSchedule warm{false, 4, 0.0f, 0};
  CHECK(warm.at(1, 2.0f) == 0.0f);  // iteration 0
  CHECK(warm.at(3, 2.0f) == Approx(1.0));
  CHECK(warm.at(5, 2.0f) == 2.0f);
  CHECK(warm.at(500, 2.0f) == 2.0f);
  CHECK(LrSchedule{}.at(1, 2.0f) == 2.0f);

  const LrSchedule cosine{true, 7, 0.1f, 21};  // CS336's test: max 1, min 0.1, warmup 7, cycle 21
  CHECK(cosine.at(1, 1.0f) == 0.0f);
  CHECK(cosine.at(8, 1.0f) == Approx(1.0));                      // iteration 7: the peak
  CHECK(cosine.at(15, 1.0f) == Approx(0.55));                    // half way: the mean of peak and floor
  CHECK(cosine.at(22, 1.0f) == Approx(0.1));                     // iteration 21: the floor
  CHECK(cosine.at(30, 1.0f) == Approx(0.1));                     // and after
  for (std::int64_t step = 9; step <= 22; ++step) {               // falling all the way
    INFO("step " << step);
    CHECK(cosine.at(step, 1.0f) < cosine.at(step - 1, 1.0f));
    const double it = static_cast<double>(step - 1);
    CHECK(cosine.at(step, 1.0f) ==
          Approx(0.1 + 0.45 * (1 + std::cos(std::numbers::pi * (it - 7) / 14))).epsilon(1e-6));
  }
  TrainOptions o = tiny(3);
  o.schedule = LrSchedule{true, 3, 0.0f, 0};  // the cycle defaults to the run's 3 steps: no room after warmup
  CHECK_THROWS_WITH(train(o), Catch::Contains("the cosine needs more steps than the warmup"));
  o.schedule = LrSchedule{true, 0, 1.0f, 0};
  CHECK_THROWS_WITH(train(o), Catch::Contains("minimum learning rate 1 above the peak 0.003"));
}

}  // namespace model_checkpoint_test
