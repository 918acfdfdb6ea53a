// Checkpoints on the emu backend (the cuda backend's code path): the device's
// AdamW moments and step, and the bf16 weight copy, come back from a
// checkpoint as the uninterrupted run left them.
#include "model/checkpoint.hpp"

#include <catch2/catch.hpp>

#include "model/train.hpp"
#include "support.hpp"

namespace model_checkpoint_emu_test {

using namespace ktune::model;

TEST_CASE("emu backend, compiled bf16: a run resumed from its checkpoint takes the uninterrupted run's steps",
          "[emu][model][checkpoint]") {
  const auto dir = ktune::test::scratch_dir("checkpoint-emu");
  TrainOptions o;
  o.model = model_config("tiny");
  o.shape = RunShape{1, 12};
  o.threads = 2;
  o.seed = 5;
  o.steps = 4;
  o.backend.backend = "emu";
  o.backend.precision = Precision::kBf16;
  o.schedule = LrSchedule{true, 1, 1e-4f, 0};
  const auto straight = train(o);

  TrainOptions part = o;
  part.steps = 2;
  part.schedule.cycle = o.steps;
  part.checkpoint = (dir / "run.ckpt").string();
  train(part);
  part.steps = 4;
  part.resume = true;
  const auto tail = train(part);
  REQUIRE(tail.size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK(tail[i].step == straight[i + 2].step);
    CHECK(tail[i].loss == straight[i + 2].loss);
  }
  CHECK(straight.back().loss < straight.front().loss);
}

}  // namespace model_checkpoint_emu_test
