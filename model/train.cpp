// Training and evaluation loops (see train.hpp).
#include "model/train.hpp"

#include <chrono>
#include <cmath>

#include "model/data.hpp"
#include "model/memory_plan.hpp"
#include "model/weights.hpp"

namespace ktune::model {

namespace {

TokenStream stream_for(const RunOptions& o) {
  return o.tokens_file.empty() ? TokenStream::synthetic(o.model.vocab, o.seed + 1)
                               : TokenStream::from_file(o.tokens_file, o.model.vocab);
}

std::unique_ptr<Runtime> start(const RunOptions& o, Allocation allocation) {
  BackendOptions b = o.backend;
  b.threads = o.threads;
  auto rt = make_runtime(o.model, o.shape, allocation, b);
  std::vector<float> params(static_cast<std::size_t>(rt->layout().total));
  if (o.weights.empty())
    init_parameters<float>(rt->layout(), params.data(), o.seed);
  else
    load_parameters<float>(o.model, rt->layout(), params, read_safetensors(o.weights), o.weights);
  rt->set_parameters(params);
  return rt;
}

// The host holds the run on the cpu and emu backends; a GPU's memory is its own.
void require_memory(const RunOptions& o, const MemoryPlan& plan, std::int64_t peak, const std::string& run) {
  if (o.backend.backend != "cuda") require_host_memory(plan, peak, run);
}

}  // namespace

std::vector<StepRecord> train(const TrainOptions& o, const std::function<void(const StepRecord&)>& on_step,
                              const std::function<void(const Runtime&)>& on_start) {
  check_backend_name(o.backend.backend);
  const MemoryPlan plan = plan_memory(o.model, o.shape, o.threads);
  require_memory(o, plan, plan.peak_step(), "training");
  auto model = start(o, Allocation::kTrain);
  if (on_start) on_start(*model);
  const TokenStream stream = stream_for(o);
  std::mt19937_64 rng(o.seed);
  std::vector<std::int32_t> tokens, targets;
  std::vector<StepRecord> records;
  for (std::int64_t s = 1; s <= o.steps; ++s) {
    stream.sample(o.shape, rng, tokens, targets);
    const auto t0 = std::chrono::steady_clock::now();
    const auto before = model->launches();
    StepRecord r;
    r.step = s;
    r.loss = model->forward(tokens, targets);
    model->backward();
    model->step(o.hyper);
    model->synchronize();
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (before) r.launches = model->launches()->since(*before);
    records.push_back(r);
    if (on_step) on_step(r);
  }
  if (!o.save.empty())
    write_safetensors(o.save, parameters_file<float>(o.model, model->layout(), model->parameters()));
  return records;
}

EvalResult evaluate(const RunOptions& o, bool gradients) {
  check_backend_name(o.backend.backend);
  const MemoryPlan plan = plan_memory(o.model, o.shape, o.threads);
  require_memory(o, plan, gradients ? plan.peak_forward_backward() : plan.peak_forward(), "evaluating");
  auto model = start(o, gradients ? Allocation::kTrain : Allocation::kForwardOnly);
  const TokenStream stream = stream_for(o);
  std::mt19937_64 rng(o.seed);
  std::vector<std::int32_t> tokens, targets;
  stream.sample(o.shape, rng, tokens, targets);
  EvalResult r;
  const auto before = model->launches();
  r.loss = model->forward(tokens, targets);
  if (gradients) model->backward();
  if (before) r.launches = model->launches()->since(*before);
  if (gradients) {
    const auto grads = model->gradients();
    double total = 0;
    for (const auto& info : model->layout().tensors) {
      double sq = 0;
      for (std::int64_t i = 0; i < info.numel; ++i) sq += static_cast<double>(grads[info.offset + i]) * grads[info.offset + i];
      r.grad_norms.emplace_back(info.name, std::sqrt(sq));
      total += sq;
    }
    r.grad_norm_total = std::sqrt(total);
  }
  return r;
}

}  // namespace ktune::model
