// End-to-end benchmark (see bench_e2e.hpp).
#include "model/bench_e2e.hpp"


#include "base/stamp.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <random>

#include "base/error.hpp"
#include "model/memory_plan.hpp"
#include "model/runtime.hpp"

namespace ktune::model {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0, Clock::time_point t1) {
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

PhaseStats stats(const std::vector<double>& v) {
  PhaseStats s;
  if (v.empty()) return s;
  s.measured = true;
  for (double x : v) s.mean_ms += x;
  s.mean_ms /= static_cast<double>(v.size());
  if (v.size() > 1) {
    double sq = 0;
    for (double x : v) sq += (x - s.mean_ms) * (x - s.mean_ms);
    s.std_ms = std::sqrt(sq / static_cast<double>(v.size() - 1));
  }
  return s;
}


nlohmann::json phase_json(const PhaseStats& p) {
  if (!p.measured) return nullptr;
  return {{"mean_ms", p.mean_ms}, {"std_ms", p.std_ms}};
}

nlohmann::json launches_json(const std::optional<LaunchCount>& l) {
  if (!l) return nullptr;
  return {{"kernels", l->kernels}, {"gemms", l->gemms}, {"by_family", l->by_family}};
}

const char* passes_name(E2ePasses p) {
  switch (p) {
    case E2ePasses::kForward: return "forward";
    case E2ePasses::kForwardBackward: return "forward_backward";
    case E2ePasses::kStep: return "step";
  }
  return "?";
}

}  // namespace

std::string cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown CPU";
}

E2eResult bench_e2e(const E2eOptions& o) {
  check_backend_name(o.backend);
  KTUNE_REQUIRE(o.trials > 0, fmt::format("trials must be positive, got {}", o.trials));
  KTUNE_REQUIRE(o.warmup >= 0, fmt::format("warm-up steps must be >= 0, got {}", o.warmup));
  const bool backward = o.passes != E2ePasses::kForward;
  const bool optimizer = o.passes == E2ePasses::kStep;
  const MemoryPlan plan = plan_memory(o.model, o.shape, o.threads);
  if (o.backend != "cuda")
    require_host_memory(plan,
                        optimizer  ? plan.peak_step()
                        : backward ? plan.peak_forward_backward()
                                   : plan.peak_forward(),
                        "benchmarking");
  auto model = make_runtime(o.model, o.shape, backward ? Allocation::kTrain : Allocation::kForwardOnly,
                            {.backend = o.backend, .mode = o.mode, .cache = o.cache, .threads = o.threads});
  const templates::adamw::AdamwHyper hyper{};

  std::mt19937_64 rng(0);
  std::uniform_int_distribution<std::int32_t> pick(0, static_cast<std::int32_t>(o.model.vocab - 1));
  std::vector<std::int32_t> tokens(o.shape.tokens()), targets(o.shape.tokens());
  for (auto& t : tokens) t = pick(rng);
  for (auto& t : targets) t = pick(rng);

  std::vector<double> fwd, bwd, fb, optim, step;
  std::optional<LaunchCount> before, launches;
  for (std::int64_t i = 0; i < o.warmup + o.trials; ++i) {
    model->synchronize();
    before = model->launches();
    const auto t0 = Clock::now();
    model->forward(tokens, targets);  // waits for the loss
    const auto t1 = Clock::now();
    if (backward) model->backward();
    model->synchronize();
    const auto t2 = Clock::now();
    if (optimizer) model->step(hyper);
    model->synchronize();
    const auto t3 = Clock::now();
    if (before) launches = model->launches()->since(*before);  // every step launches the same
    if (i < o.warmup) continue;
    fwd.push_back(ms_since(t0, t1));
    if (backward) {
      bwd.push_back(ms_since(t1, t2));
      fb.push_back(ms_since(t0, t2));
    }
    if (optimizer) {
      optim.push_back(ms_since(t2, t3));
      step.push_back(ms_since(t0, t3));
    }
  }
  E2eResult r;
  r.options = o;
  r.forward = stats(fwd);
  r.backward = stats(bwd);
  r.forward_backward = stats(fb);
  r.optimizer = stats(optim);
  r.step = stats(step);
  r.plan = plan;
  r.allocated_bytes = model->allocated_bytes();
  r.device = model->device();
  r.kernels = model->kernel_summary();
  r.launches = launches;
  r.date = utc_now();
  return r;
}

nlohmann::json to_json(const E2eResult& r) {
  const auto& o = r.options;
  return {{"benchmark", "e2e"},
          {"backend", o.backend},
          {"mode", o.backend == "cpu" ? "reference" : to_string(o.mode)},
          {"kernels", r.kernels},
          {"device", r.device},
          {"date", r.date},
          {"git_revision", git_revision()},
          {"ktune_version", ktune_version()},
          {"model", o.model.name},
          {"d_model", o.model.d_model},
          {"d_ff", o.model.d_ff},
          {"num_layers", o.model.layers},
          {"num_heads", o.model.heads},
          {"vocab_size", o.model.vocab},
          {"context_length", o.shape.context},
          {"batch_size", o.shape.batch},
          {"num_warmups", o.warmup},
          {"num_trials", o.trials},
          {"passes", passes_name(o.passes)},
          {"dtype", "float32"},
          {"threads", o.threads},
          {"forward", phase_json(r.forward)},
          {"backward", phase_json(r.backward)},
          {"forward_backward", phase_json(r.forward_backward)},
          {"optimizer", phase_json(r.optimizer)},
          {"step", phase_json(r.step)},
          {"allocated_bytes", r.allocated_bytes},
          {"launches_per_step", launches_json(r.launches)}};
}

}  // namespace ktune::model
