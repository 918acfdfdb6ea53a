#include "model/bench_e2e.hpp"

#include <catch2/catch.hpp>

#include <cmath>

#include "base/error.hpp"
#include "base/safetensors.hpp"
#include "support.hpp"

namespace model_bench_e2e_test {

using namespace ktune;
using namespace ktune::model;

TEST_CASE("the e2e benchmark measures the passes it is asked for", "[model][bench]") {
  E2eOptions o;
  o.model = model_config("tiny");
  o.shape = RunShape{2, 16};
  o.warmup = 1;
  o.trials = 2;
  o.backend.threads = 2;
  o.passes = E2ePasses::kStep;
  const E2eResult r = bench_e2e(o);
  CHECK(r.forward.measured);
  CHECK(r.backward.measured);
  CHECK(r.optimizer.measured);
  CHECK(r.forward_backward.mean_ms >= r.forward.mean_ms);
  CHECK(r.allocated_bytes == r.plan.peak_step());
  const auto j = to_json(r);
  CHECK(j.at("num_trials") == 2);
  CHECK(j.at("step").at("mean_ms").get<double>() > 0);
  CHECK(j.at("step").at("median_ms").get<double>() == r.step.median_ms);
  CHECK(j.at("step").at("std_ms").get<double>() == r.step.std_ms);
  // Every trial kept, so mean, std and median can be checked.
  const std::vector<double> steps = j.at("step").at("samples_ms");
  REQUIRE(steps.size() == 2);
  CHECK((steps[0] + steps[1]) / 2 == Approx(r.step.mean_ms));
  CHECK_FALSE(r.launches);  // the cpu backend launches nothing
  CHECK(j.at("launches_per_step").is_null());
  // A forward alone recomputes nothing, whatever --recompute says.
  E2eOptions forward = o;
  forward.passes = E2ePasses::kForward;
  forward.shape.recompute = Recompute::kBlocks;
  forward.trials = 1;
  CHECK(to_json(bench_e2e(forward)).at("recompute") == "none");
  // One trial has no sample std: null, not a std of 0 (the markdown writes "-").
  o.trials = 1;
  const auto one = to_json(bench_e2e(o));
  CHECK(one.at("step").at("std_ms").is_null());
  CHECK(one.at("step").at("mean_ms").get<double>() > 0);

  o.passes = E2ePasses::kForward;
  const E2eResult f = bench_e2e(o);
  CHECK_FALSE(f.backward.measured);
  CHECK(f.allocated_bytes == f.plan.peak_forward());
  CHECK(to_json(f).at("backward").is_null());

  o.backend.backend = "tpu";
  CHECK_THROWS_WITH(bench_e2e(o), Catch::Contains("backend 'tpu'; accepted: cpu, cuda, emu"));
  o.backend.backend = "cpu";
  o.backend.cache = "tuned.json";
  CHECK_THROWS_WITH(bench_e2e(o), Catch::Contains("the cpu backend has none"));
}

TEST_CASE("a stop request ends the e2e benchmark after the step under way, its trials so far the result",
          "[model][bench]") {
  E2eOptions o;
  o.model = model_config("tiny");
  o.shape = RunShape{1, 8};
  o.warmup = 1;
  o.trials = 50;
  o.backend.threads = 1;
  std::int64_t steps = 0;
  o.on_step = [&](std::int64_t done, std::int64_t) { steps = done; };
  o.should_stop = [&] { return steps >= 4; };  // the warm-up and 3 trials
  const E2eResult r = bench_e2e(o);
  CHECK(steps == 4);
  CHECK(r.options.trials == 3);
  CHECK(r.trials_planned == 50);
  CHECK_FALSE(r.complete());
  CHECK(r.forward.measured);
  const auto j = to_json(r);
  CHECK(j.at("num_trials") == 3);
  CHECK(j.at("num_trials_planned") == 50);
  CHECK(j.at("complete") == false);

  // Stopped in the warm-up: no trial measured.
  o.warmup = 3;
  steps = 0;
  o.should_stop = [&] { return steps >= 1; };
  const E2eResult w = bench_e2e(o);
  CHECK(w.options.trials == 0);
  CHECK_FALSE(w.forward.measured);
  CHECK_FALSE(w.complete());

  // Never asked to stop: whole, and the profile too.
  o.warmup = 0;
  o.trials = 2;
  o.profile = true;
  o.should_stop = [] { return false; };
  const E2eResult whole = bench_e2e(o);
  CHECK(whole.complete());
  CHECK(whole.profile_steps == 2);
  CHECK(to_json(whole).at("complete") == true);
}

TEST_CASE("a phase's statistics: mean and sample std as the seeds', and a median one slow trial does not move",
          "[model][bench]") {
  const PhaseStats odd = phase_stats({12.0, 11.0, 1000.0, 13.0, 12.5});
  CHECK(odd.measured);
  CHECK(odd.median_ms == 12.5);
  CHECK(odd.mean_ms == Approx(209.7));
  CHECK(odd.std_ms == Approx(441.8).epsilon(1e-3));
  CHECK(phase_stats({4.0, 1.0, 3.0, 2.0}).median_ms == 2.5);
  CHECK(phase_stats({7.0}).median_ms == 7.0);
  CHECK(phase_stats({7.0}).std_ms == 0.0);
  CHECK_FALSE(phase_stats({}).measured);
}

TEST_CASE("the e2e benchmark stamps its clock, memory and loss, and saves its batch for a peer", "[model][bench]") {
  E2eOptions o;
  o.model = model_config("tiny");
  o.shape = RunShape{2, 16};
  o.warmup = 0;
  o.trials = 1;
  o.backend.threads = 1;
  o.passes = E2ePasses::kStep;
  const auto dir = ktune::test::scratch_dir("bench_e2e");
  o.save_batch = (dir / "batch.safetensors").string();
  const E2eResult r = bench_e2e(o);
  CHECK(r.clock == "host clock");
  CHECK(r.plan_peak_bytes == r.plan.peak_step());
  CHECK_FALSE(r.device_peak_bytes.has_value());  // no device memory on cpu
  CHECK(r.driver.empty());
  // A fresh model's loss is near log(vocab).
  CHECK(r.loss == Approx(std::log(128.0)).epsilon(0.1));
  const auto j = to_json(r);
  // No GPU: neither the CUDA driver API version nor the NVIDIA driver's release.
  CHECK(j.at("cuda_driver_api_version").is_null());
  CHECK(j.at("nvidia_driver").is_null());
  CHECK_FALSE(j.contains("driver"));
  CHECK(j.at("clock") == "host clock");
  CHECK(j.at("plan_peak_bytes") == r.plan.peak_step());
  CHECK(j.at("device_peak_bytes").is_null());
  CHECK(j.at("loss").get<double>() == r.loss);
  CHECK(j.contains("git_revision"));

  // The saved file holds the starting weights and the batch.
  auto file = read_safetensors(o.save_batch);
  const auto& tokens = file.at("tokens");
  CHECK(tokens.dtype == "I32");
  CHECK(tokens.shape == std::vector<std::int64_t>{2, 16});
  CHECK(file.at("lm_head.weight").shape == std::vector<std::int64_t>{128, 64});

  // Started from those weights, the first loss is the same; from other weights, another.
  o.save_batch.clear();
  o.weights = (dir / "batch.safetensors").string();
  CHECK(bench_e2e(o).loss == Approx(r.loss).epsilon(1e-6));
  auto& head = file.tensors.at("lm_head.weight");
  auto* w = reinterpret_cast<float*>(head.bytes.data());
  for (std::int64_t i = 0; i < head.numel(); ++i) w[i] *= 8;
  write_safetensors(dir / "scaled.safetensors", file);
  o.weights = (dir / "scaled.safetensors").string();
  CHECK(std::abs(bench_e2e(o).loss - r.loss) > 1e-3);
}

}  // namespace model_bench_e2e_test
