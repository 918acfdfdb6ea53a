// Model and run-shape options (see model_args.hpp).
#include "cli/model_args.hpp"

#include <fmt/format.h>

#include <thread>

namespace ktune::cli {

void add_model_options(CLI::App* cmd, ModelArgs& a, bool shape, bool threads) {
  cmd->add_option("--model", a.model,
                  fmt::format("Model size: {}", fmt::join(model::model_names(), ", ")))->capture_default_str();
  cmd->add_option("--d-model", a.d_model, "Override d_model");
  cmd->add_option("--d-ff", a.d_ff, "Override d_ff");
  cmd->add_option("--layers", a.layers, "Override the number of blocks");
  cmd->add_option("--heads", a.heads, "Override the number of heads");
  cmd->add_option("--vocab", a.vocab, "Override the vocabulary size");
  if (shape) {
    cmd->add_option("--ctx", a.ctx, "Context length");
    cmd->add_option("--batch", a.batch, "Batch size");
  }
  if (threads) cmd->add_option("--threads", a.threads, "CPU threads (default: all)");
}

model::ModelConfig model_from_args(const ModelArgs& a) {
  model::ModelConfig c = model::model_config(a.model);
  bool changed = false;
  auto apply = [&](std::int64_t v, std::int64_t& field) {
    if (v != 0 && v != field) {
      field = v;
      changed = true;
    }
  };
  apply(a.d_model, c.d_model);
  apply(a.d_ff, c.d_ff);
  apply(a.layers, c.layers);
  apply(a.heads, c.heads);
  apply(a.vocab, c.vocab);
  if (changed) c.name = "custom";
  c.validate();
  return c;
}

model::RunShape shape_from_args(const ModelArgs& a, std::int64_t default_ctx, std::int64_t default_batch) {
  model::RunShape s{a.batch ? a.batch : default_batch, a.ctx ? a.ctx : default_ctx};
  s.validate();
  return s;
}

unsigned threads_from_args(const ModelArgs& a) {
  return a.threads ? a.threads : std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace ktune::cli
