// Training and evaluation loops (see train.hpp).
#include "model/train.hpp"

#include <chrono>
#include <cmath>

#include "model/data.hpp"
#include "model/memory_plan.hpp"
#include "model/optimizer.hpp"
#include "model/transformer.hpp"
#include "model/weights.hpp"

namespace ktune::model {

namespace {

TokenStream stream_for(const RunOptions& o) {
  return o.tokens_file.empty() ? TokenStream::synthetic(o.model.vocab, o.seed + 1)
                               : TokenStream::from_file(o.tokens_file, o.model.vocab);
}

void start_weights(Transformer<float>& m, const RunOptions& o) {
  if (o.weights.empty())
    m.init_parameters(o.seed);
  else
    load_weights(m, std::filesystem::path(o.weights));
}

}  // namespace

std::vector<StepRecord> train(const TrainOptions& o, const std::function<void(const StepRecord&)>& on_step) {
  const MemoryPlan plan = plan_memory(o.model, o.shape, o.threads);
  require_host_memory(plan, plan.peak_step(), "training");
  Transformer<float> model(o.model, o.shape, Allocation::kTrain, o.threads);
  start_weights(model, o);
  const TokenStream stream = stream_for(o);
  AdamW opt(model.layout().total, o.hyper);
  std::mt19937_64 rng(o.seed);
  std::vector<std::int32_t> tokens, targets;
  std::vector<StepRecord> records;
  for (std::int64_t s = 1; s <= o.steps; ++s) {
    stream.sample(o.shape, rng, tokens, targets);
    const auto t0 = std::chrono::steady_clock::now();
    StepRecord r;
    r.step = s;
    r.loss = model.forward(tokens, targets);
    model.backward();
    opt.step(model.parameters(), model.gradients(), model.parallel());
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    records.push_back(r);
    if (on_step) on_step(r);
  }
  if (!o.save.empty()) save_weights(model, std::filesystem::path(o.save));
  return records;
}

EvalResult evaluate(const RunOptions& o, bool gradients) {
  const MemoryPlan plan = plan_memory(o.model, o.shape, o.threads);
  require_host_memory(plan, gradients ? plan.peak_forward_backward() : plan.peak_forward(), "evaluating");
  Transformer<float> model(o.model, o.shape, gradients ? Allocation::kTrain : Allocation::kForwardOnly, o.threads);
  start_weights(model, o);
  const TokenStream stream = stream_for(o);
  std::mt19937_64 rng(o.seed);
  std::vector<std::int32_t> tokens, targets;
  stream.sample(o.shape, rng, tokens, targets);
  EvalResult r;
  r.loss = model.forward(tokens, targets);
  if (gradients) {
    model.backward();
    double total = 0;
    for (const auto& info : model.layout().tensors) {
      double sq = 0;
      for (float g : model.gradient(info.name)) sq += static_cast<double>(g) * g;
      r.grad_norms.emplace_back(info.name, std::sqrt(sq));
      total += sq;
    }
    r.grad_norm_total = std::sqrt(total);
  }
  return r;
}

}  // namespace ktune::model
