// End-to-end benchmark (see bench_e2e.hpp).
#include "model/bench_e2e.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <fstream>
#include <random>

#include "base/error.hpp"
#include "base/stamp.hpp"
#include "model/memory_plan.hpp"
#include "model/runtime.hpp"
#include "base/safetensors.hpp"
#include "model/weights.hpp"

namespace ktune::model {

PhaseStats phase_stats(std::vector<double> v) {
  PhaseStats s;
  if (v.empty()) return s;
  s.measured = true;
  s.samples_ms = v;
  for (double x : v) s.mean_ms += x;
  s.mean_ms /= static_cast<double>(v.size());
  if (v.size() > 1) {
    double sq = 0;
    for (double x : v) sq += (x - s.mean_ms) * (x - s.mean_ms);
    s.std_ms = std::sqrt(sq / static_cast<double>(v.size() - 1));
  }
  std::sort(v.begin(), v.end());
  const std::size_t h = v.size() / 2;
  s.median_ms = v.size() % 2 ? v[h] : (v[h - 1] + v[h]) / 2;
  return s;
}

namespace {

nlohmann::json phase_json(const PhaseStats& p) {
  if (!p.measured) return nullptr;
  // A single trial has no sample std: null, as the markdown's "-".
  return {{"mean_ms", p.mean_ms},
          {"std_ms", p.samples_ms.size() > 1 ? nlohmann::json(p.std_ms) : nlohmann::json()},
          {"median_ms", p.median_ms},
          {"samples_ms", p.samples_ms}};
}

nlohmann::json profile_json(const std::vector<OpTimes>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : rows)
    out.push_back({{"phase", r.phase},
                   {"op", r.op},
                   {"shape", r.shape},
                   {"calls", r.calls},
                   {"flops", r.flops},
                   {"device_ms", phase_json(phase_stats(r.device_ms))},
                   {"host_ms", phase_json(phase_stats(r.host_ms))}});
  return out;
}

nlohmann::json phase_kinds_json(const std::vector<OpTimes>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& k : phase_kinds(rows))
    out.push_back({{"phase", k.phase},
                   {"ms", k.total_ms()},
                   {"gemm_ms", k.gemm_ms},
                   {"attention_ms", k.attention_ms},
                   {"rest_ms", k.rest_ms}});
  return out;
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
  check_backend_name(o.backend.backend);
  KTUNE_REQUIRE(o.trials > 0, fmt::format("trials must be positive, got {}", o.trials));
  KTUNE_REQUIRE(o.warmup >= 0, fmt::format("warm-up steps must be >= 0, got {}", o.warmup));
  const bool backward = o.passes != E2ePasses::kForward;
  const bool optimizer = o.passes == E2ePasses::kStep;
  const BackendOptions& backend = o.backend;
  const MemoryPlan plan = plan_run(o.model, o.shape, backend);
  const Allocation allocation = e2e_allocation(o.passes);
  if (backend.backend != "cuda") require_host_memory(plan, plan.peak(allocation), "benchmarking");
  auto model = make_runtime(o.model, o.shape, allocation, backend);
  templates::adamw::AdamwHyper hyper{};
  hyper.max_grad_norm = o.clip_norm;
  if (!o.weights.empty()) {
    std::vector<float> params = model->parameters();
    load_parameters<float>(o.model, model->layout(), std::span<float>(params), SafetensorsReader(o.weights),
                           o.weights);
    model->set_parameters(params);
  }

  std::mt19937_64 rng(0);
  std::uniform_int_distribution<std::int32_t> pick(0, static_cast<std::int32_t>(o.model.vocab - 1));
  std::vector<std::int32_t> tokens(o.shape.tokens()), targets(o.shape.tokens());
  for (auto& t : tokens) t = pick(rng);
  for (auto& t : targets) t = pick(rng);
  if (!o.save_batch.empty()) {
    TensorFile f = parameters_file<float>(o.model, model->layout(), model->parameters());
    const auto batch = [&](const std::vector<std::int32_t>& v) {
      return SafeTensor{"I32", {o.shape.batch, o.shape.context},
                        std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(std::int32_t))};
    };
    f.add("tokens", batch(tokens));
    f.add("targets", batch(targets));
    write_safetensors(o.save_batch, f);
  }

  // Each phase between two marks: CUDA events on the stream on a GPU, the
  // host clock after waiting elsewhere. Device memory in use is read after
  // each step (outside the marks), its largest value the measured peak.
  std::vector<double> fwd, bwd, fb, optim, step;
  double first_loss = 0;
  std::optional<LaunchCount> before, launches;
  std::optional<std::int64_t> peak_in_use = model->device_bytes_in_use();
  const auto sample_memory = [&] {
    if (const auto now = model->device_bytes_in_use()) peak_in_use = std::max(peak_in_use.value_or(0), *now);
  };
  const std::int64_t steps = o.warmup + o.trials * (o.profile ? 2 : 1);
  for (std::int64_t i = 0; i < o.warmup + o.trials; ++i) {
    model->synchronize();
    before = model->launches();
    const auto t0 = model->mark();
    const double loss = model->forward(tokens, targets);  // waits for the loss
    if (i == 0) first_loss = loss;
    const auto t1 = model->mark();
    if (backward) model->backward();
    const auto t2 = model->mark();
    if (optimizer) model->step(hyper);
    const auto t3 = model->mark();
    model->synchronize();
    sample_memory();
    if (before) launches = model->launches()->since(*before);  // every step launches the same
    if (o.on_step) o.on_step(i + 1, steps);
    if (i >= o.warmup) {
      fwd.push_back(model->elapsed_ms(*t0, *t1));
      if (backward) {
        bwd.push_back(model->elapsed_ms(*t1, *t2));
        fb.push_back(model->elapsed_ms(*t0, *t2));
      }
      if (optimizer) {
        optim.push_back(model->elapsed_ms(*t2, *t3));
        step.push_back(model->elapsed_ms(*t0, *t3));
      }
    }
    if (o.should_stop && o.should_stop()) break;  // the steps so far are the result
  }
  E2eResult r;
  const auto trials = static_cast<std::int64_t>(fwd.size());
  if (o.profile && trials == o.trials && !(o.should_stop && o.should_stop())) {
    OpProfile profile(model->op_clock());
    model->set_profile(&profile);
    for (std::int64_t i = 0; i < o.trials; ++i) {
      profile.begin_step();
      model->forward(tokens, targets);
      if (backward) model->backward();
      if (optimizer) model->step(hyper);
      profile.end_step();
      ++r.profile_steps;
      if (o.on_step) o.on_step(o.warmup + o.trials + i + 1, steps);
      if (o.should_stop && o.should_stop()) break;
    }
    model->set_profile(nullptr);
    r.profile = profile.rows();
  }
  r.options = o;
  r.options.trials = trials;
  if (!backward) r.options.shape.recompute = Recompute::kNone;  // a forward alone recomputes nothing
  r.trials_planned = o.trials;
  r.forward = phase_stats(fwd);
  r.backward = phase_stats(bwd);
  r.forward_backward = phase_stats(fb);
  r.optimizer = phase_stats(optim);
  r.step = phase_stats(step);
  r.plan = plan;
  r.loss = first_loss;
  r.allocated_bytes = model->allocated_bytes();
  r.plan_peak_bytes = plan.peak(allocation);
  r.device_peak_bytes = peak_in_use;
  r.clock = model->clock();
  r.driver = model->driver();
  if (!r.driver.empty()) r.nvidia_driver = nvidia_driver_release();
  r.warnings = model->warnings();
  // A pass runs op by op on its first run, is captured on its second and replayed after.
  if (backend.graphs && o.warmup < 2)
    r.warnings.push_back(o.warmup == 1 ? "with graphs, a pass is captured on its second run: trial 1 includes the "
                                         "capture (--warmup 2 times replays alone)"
                                       : "with graphs, a pass runs op by op on its first run and is captured on its "
                                         "second: trials 1 and 2 are no replays (--warmup 2 times replays alone)");
  r.device = model->device();
  r.kernels = model->kernel_summary();
  r.kernel_choices = model->kernel_choices();
  r.launches = launches;
  r.date = utc_now();
  return r;
}

double train_flops(const E2eResult& r) {
  return static_cast<double>(r.options.shape.tokens()) * r.options.model.train_flops_per_token(r.options.shape.context);
}

nlohmann::json kernel_choices_json(const std::vector<Runtime::KernelChoice>& choices) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& c : choices) {
    nlohmann::json j = {{"family", c.family}, {"problem", c.problem}, {"config", nlohmann::json::parse(c.config)},
                        {"match", c.match}, {"source", c.source}};
    if (!c.other_gpu.empty()) j["tuned_on"] = c.other_gpu;
    out.push_back(std::move(j));
  }
  return out;
}

nlohmann::json to_json(const E2eResult& r) {
  const auto& o = r.options;
  return {{"benchmark", "e2e"},
          {"backend", o.backend.backend},
          {"mode", o.backend.backend == "cpu" ? "reference" : to_string(o.backend.mode)},
          {"kernels", r.kernels},
          {"kernel_choices", kernel_choices_json(r.kernel_choices)},
          {"graphs", o.backend.graphs},
          {"programmatic_launch", o.backend.programmatic},
          {"deterministic", o.backend.deterministic},
          {"device", r.device},
          {"cuda_driver_api_version", r.driver.empty() ? nlohmann::json() : nlohmann::json(std::stoi(r.driver))},
          {"nvidia_driver", r.nvidia_driver.empty() ? nlohmann::json() : nlohmann::json(r.nvidia_driver)},
          {"clock", r.clock},
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
          {"recompute", to_string(o.shape.recompute)},
          {"num_warmups", o.warmup},
          {"num_trials", o.trials},
          {"num_trials_planned", r.trials_planned},
          {"complete", r.complete()},
          {"passes", passes_name(o.passes)},
          {"loss", r.loss},
          {"train_flops", train_flops(r)},
          {"dtype", to_string(o.backend.precision)},
          {"threads", o.backend.threads},
          {"forward", phase_json(r.forward)},
          {"backward", phase_json(r.backward)},
          {"forward_backward", phase_json(r.forward_backward)},
          {"optimizer", phase_json(r.optimizer)},
          {"step", phase_json(r.step)},
          {"allocated_bytes", r.allocated_bytes},
          {"plan_peak_bytes", r.plan_peak_bytes},
          {"device_peak_bytes", r.device_peak_bytes ? nlohmann::json(*r.device_peak_bytes) : nlohmann::json()},
          {"warnings", r.warnings},
          {"launches_per_step", launches_json(r.launches)},
          {"profile", o.profile ? profile_json(r.profile) : nlohmann::json()},
          {"profile_phases", o.profile ? phase_kinds_json(r.profile) : nlohmann::json()}};
}

std::vector<PhaseKinds> phase_kinds(const std::vector<OpTimes>& profile) {
  std::vector<PhaseKinds> out;
  PhaseKinds all{"all"};
  for (const char* phase : {"forward", "backward", "optimizer"}) {
    PhaseKinds k{phase};
    bool present = false;
    for (const auto& row : profile) {
      if (row.phase != phase) continue;
      present = true;
      const double ms = phase_stats(row.device_ms).median_ms;
      double& kind = row.op == "gemm" ? k.gemm_ms : row.op.starts_with("attention") ? k.attention_ms : k.rest_ms;
      kind += ms;
    }
    if (!present) continue;
    all.gemm_ms += k.gemm_ms;
    all.attention_ms += k.attention_ms;
    all.rest_ms += k.rest_ms;
    out.push_back(k);
  }
  out.push_back(all);
  return out;
}

}  // namespace ktune::model
