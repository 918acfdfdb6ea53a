// `ktune bench memory`: the static memory plan by phase (seed 003's memory
// section) for model sizes and context lengths, computed without allocating.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <iostream>
#include <iterator>
#include <optional>
#include <nlohmann/json.hpp>

#include "base/json_output.hpp"
#include "cli/commands.hpp"
#include "cli/model_args.hpp"
#include "base/error.hpp"
#include "cli/options.hpp"
#include "model/memory_plan.hpp"
#include "model/ops/device_ops.hpp"
#include "model/runtime.hpp"

namespace ktune::cli {

namespace {

struct PlanRow {
  const char* name;  // markdown label
  const char* key;   // JSON key
  std::int64_t (*bytes)(const model::MemoryPlan&);
};

const PlanRow kRows[] = {
    {"parameters", "parameters", [](const model::MemoryPlan& p) { return p.parameters; }},
    {"bf16 weight copy", "weight_copy", [](const model::MemoryPlan& p) { return p.weight_copy; }},
    {"gradients", "gradients", [](const model::MemoryPlan& p) { return p.gradients; }},
    {"optimizer state (AdamW m, v)", "optimizer_state", [](const model::MemoryPlan& p) { return p.optimizer_state; }},
    {"inputs (tokens, targets)", "inputs", [](const model::MemoryPlan& p) { return p.inputs; }},
    {"activations, forward-only (1 block + head)", "activations_forward",
     [](const model::MemoryPlan& p) { return p.activations_forward; }},
    {"activations kept for backward", "activations_backward",
     [](const model::MemoryPlan& p) { return p.activations_backward; }},
    {"  of which per block", "activations_per_block",
     [](const model::MemoryPlan& p) { return p.per_layer_activations; }},
    {"  of which each block keeps (the rest recomputed)", "activations_kept_per_block",
     [](const model::MemoryPlan& p) { return p.per_layer_kept; }},
    {"workspace, forward", "workspace_forward", [](const model::MemoryPlan& p) { return p.workspace_forward; }},
    {"workspace, forward+backward", "workspace_backward",
     [](const model::MemoryPlan& p) { return p.workspace_backward; }},
    {"ops' scratch (attention's dS, eager chains' temporaries, workspaces)", "scratch",
     [](const model::MemoryPlan& p) { return std::max(p.scratch, p.step_scratch); }},
    {"**peak, forward-only**", "peak_forward", [](const model::MemoryPlan& p) { return p.peak_forward(); }},
    {"**peak, forward+backward**", "peak_forward_backward",
     [](const model::MemoryPlan& p) { return p.peak_forward_backward(); }},
    {"**peak, full step**", "peak_step", [](const model::MemoryPlan& p) { return p.peak_step(); }},
};

std::string shape_text(const std::vector<std::int64_t>& shape) {
  return shape.size() == 1 ? fmt::format("({},)", shape[0]) : fmt::format("({})", fmt::join(shape, ", "));
}

/// `--buffers`' table for one plan: every buffer of a full step, the largest
/// and the largest activation in bold.
std::string buffers_markdown(const model::MemoryPlan& p) {
  const auto rows = model::plan_buffers(p);
  const auto by_size = [](const model::BufferRow& a, const model::BufferRow& b) { return a.each < b.each; };
  const auto largest = std::max_element(rows.begin(), rows.end(), by_size);
  std::vector<model::BufferRow> activations;
  std::copy_if(rows.begin(), rows.end(), std::back_inserter(activations),
               [](const model::BufferRow& b) { return b.phase.rfind("activations", 0) == 0; });
  const auto activation = *std::max_element(activations.begin(), activations.end(), by_size);
  const auto named = [](const model::BufferRow& b) {
    return fmt::format("{} {} {}, {}", b.name, shape_text(b.shape), b.dtype, model::format_bytes(b.each));
  };
  std::int64_t total = 0;
  for (const auto& b : rows) total += b.bytes();
  std::string s = fmt::format("### Buffers of a full step at ctx {} ({} in all, the full step's peak)\n\nThe "
                              "largest: {}; the largest activation: {}.\n\n| phase | buffer | holds | shape | dtype "
                              "| each | count | bytes |\n|:--|:--|:--|:--|:--|--:|--:|--:|\n",
                              p.shape.context, model::format_bytes(total), named(*largest), named(activation));
  for (const auto& b : rows) {
    const bool bold = &b == &*largest || (b.phase == activation.phase && b.name == activation.name);
    s += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} |\n", b.phase, bold ? "**" + b.name + "**" : b.name,
                     b.what, shape_text(b.shape), b.dtype, model::format_bytes(b.each), b.count,
                     model::format_bytes(b.bytes()));
  }
  return s + "\n";
}

}  // namespace

void add_bench_memory_command(CLI::App& bench, Global& global) {
  struct Opts {
    ModelArgs m;
    std::string models = "xl";
    std::string ctx = "128,256,512";
    std::string dtype = "f32", mode = "compiled";
    std::string backend;  // empty: cpu for f32, cuda for tf32 and bf16
    std::int64_t accumulate = 1;
    std::string fit;
    bool buffers = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = bench.add_subcommand("memory", "Static memory plan by phase and context length (seed 003), each "
                                             "buffer in its dtype for --dtype, planned without allocating");
  cmd->add_option("--model", o->models, "Model sizes, comma-separated")->capture_default_str();
  add_size_options(cmd, o->m);
  cmd->add_option("--ctx", o->ctx, "Context lengths, comma-separated")->capture_default_str();
  o->m.default_ctx = 128;  // --ctx is a list here; each of its lengths is the shape's
  o->m.default_batch = 4;
  cmd->add_option("--batch", o->m.batch, "Batch size")
      ->check(integer_at_least(1))
      ->default_str(std::to_string(o->m.default_batch));
  add_threads_option(cmd, o->m);
  add_recompute_option(cmd, o->m, false);
  cmd->add_option("--accumulate", o->accumulate,
                  "Micro-batches a step (train --accumulate): the plan keeps one (vocab, d_model) fp32 buffer more, "
                  "where the embedding's and norms' gradients wait to be added")
      ->check(integer_at_least(1))
      ->capture_default_str();
  cmd->add_option("--dtype", o->dtype,
                  "The run's precision: f32; tf32 (with --mode compiled, flash attention: each block keeps the "
                  "(B, H, S) log-sum-exp instead of the (B, H, S, S) probabilities); bf16 (mixed precision: bf16 "
                  "activations and weight copy, fp32 statistics, master weights, gradients and AdamW state; flash "
                  "attention in compiled mode). tf32 and bf16 run on a device backend only")
      ->check(CLI::IsMember({"f32", "tf32", "bf16"}))
      ->capture_default_str();
  cmd->add_option("--backend", o->backend,
                  "The backend the run would use: cpu (f32 only: its ops' per-thread scratch, --threads), cuda or "
                  "emu (a device's: no per-thread scratch; materialised attention's backward keeps its (B, H, S, S) "
                  "dS in the ops' scratch)")
      ->check(CLI::IsMember({"cpu", "cuda", "emu"}))
      ->default_str("cpu for f32, cuda for tf32 and bf16");
  cmd->add_option("--mode", o->mode, "The device backends' mode the run would use: eager or compiled")
      ->check(CLI::IsMember({"eager", "compiled"}))
      ->capture_default_str();
  cmd->add_option("--fit", o->fit,
                  "Memory to fit a training step in (e.g. 40GiB, 80GB): a row more says, per context, the least "
                  "--recompute at which the step's peak fits (train --recompute auto's choice on --backend's device "
                  "with that much free: in f32, give --backend cuda for a GPU's)")
      ->check(byte_size());
  cmd->add_flag("--buffers", o->buffers,
                "Also list, per context, every buffer of a full step: its shape, dtype and bytes, the largest "
                "marked (seed 003's dtypes under mixed precision and its largest allocation)");
  cmd->callback([o, &global] {
    const auto ctxs = distinct_list(int_list_arg(o->ctx, "--ctx"), "--ctx");
    model::BackendOptions backend;
    backend.precision = model::parse_precision(o->dtype);
    backend.mode = model::parse_mode(o->mode);
    backend.threads = threads_from_args(o->m);
    // tf32 and bf16 run on a device backend only; f32 plans the cpu backend's run unless told otherwise.
    backend.backend = !o->backend.empty() ? o->backend : backend.precision == model::Precision::kF32 ? "cpu" : "cuda";
    KTUNE_REQUIRE(backend.backend != "cpu" || backend.precision == model::Precision::kF32,
                  fmt::format("the cpu backend runs f32 only, not {}; --dtype tf32 and bf16 need --backend cuda or emu",
                              o->dtype));
    const model::Recompute recompute = shape_from_args(o->m).recompute;
    const bool recomputing = recompute != model::Recompute::kNone;
    const std::int64_t fit = o->fit.empty() ? 0 : parse_bytes(o->fit).value_or(0);  // 0: no --fit
    const auto fit_name = [](const std::optional<model::Recompute>& level) {
      return level ? model::to_string(*level) : std::string("does not fit");
    };
    nlohmann::ordered_json all = nlohmann::ordered_json::array();
    std::string text;
    for (const auto& name : distinct_list(name_list_arg(o->models, "--model"), "--model")) {
      ModelArgs a = o->m;
      a.model = name;
      const auto config = model_from_args(a);
      std::vector<model::MemoryPlan> plans;
      std::vector<std::optional<model::Recompute>> fits;  // with --fit: the least level that fits, if any
      for (auto c : ctxs) {
        a.ctx = c;
        model::RunShape shape = shape_from_args(a);
        shape.micro_batches = o->accumulate;
        const auto plan_at = [&](model::Recompute level) {
          model::RunShape s = shape;
          s.recompute = level;
          return model::plan_run(config, s, backend);  // as train and bench e2e plan the run
        };
        plans.push_back(plan_at(shape.recompute));
        if (fit == 0) continue;
        const model::Recompute least = model::least_recompute(plan_at, fit);
        fits.push_back(plan_at(least).peak_step() <= fit ? std::optional(least) : std::nullopt);
      }
      const char* attention_name =
          plans.front().attention == model::AttentionSaved::kLogSumExp ? "flash" : "materialised";
      text += fmt::format("## Memory plan: {} (d_model {}, {} layers, {} heads, vocab {}), batch {}, {}, {} "
                          "attention{}{}{}\n\n",
                          config.name, config.d_model, config.layers, config.heads, config.vocab,
                          plans.front().shape.batch, o->dtype, attention_name,
                          o->backend.empty() ? "" : fmt::format(", on {}", backend.backend),
                          o->accumulate > 1 ? fmt::format(", {} micro-batches a step", o->accumulate) : "",
                          recomputing ? fmt::format(", recompute {}", model::to_string(recompute)) : "");
      text += "| phase |";
      for (auto c : ctxs) text += fmt::format(" ctx {} |", c);
      text += "\n|:--|";
      for (std::size_t i = 0; i < ctxs.size(); ++i) text += "--:|";
      text += "\n";
      for (const auto& row : kRows) {
        if (row.key == std::string("weight_copy") && backend.precision != model::Precision::kBf16) continue;
        if (row.key == std::string("activations_kept_per_block") && !recomputing) continue;
        if (row.key == std::string("scratch") && plans.front().scratch == 0) continue;  // flash, or the cpu's
        text += fmt::format("| {} |", row.name);
        for (const auto& p : plans) text += fmt::format(" {} |", model::format_bytes(row.bytes(p)));
        text += "\n";
      }
      if (fit > 0) {
        text += fmt::format("| **least --recompute for a step in {}** |", model::format_bytes(fit));
        for (const auto& level : fits) text += fmt::format(" {} |", fit_name(level));
        text += "\n";
      }
      text += "\n";
      if (o->buffers)
        for (const auto& p : plans) text += buffers_markdown(p);
      for (std::size_t i = 0; i < plans.size(); ++i) {
        const model::MemoryPlan& p = plans[i];
        nlohmann::ordered_json j = {{"model", config.name}, {"context_length", p.shape.context},
                                    {"batch_size", p.shape.batch}, {"backend", backend.backend},
                                    {"threads", p.threads}, {"dtype", o->dtype},
                                    {"attention", attention_name}, {"recompute", model::to_string(recompute)},
                                    {"micro_batches", p.shape.micro_batches}};
        for (const auto& row : kRows) j[row.key] = row.bytes(p);
        if (o->buffers) {
          j["buffers"] = nlohmann::ordered_json::array();
          for (const auto& b : model::plan_buffers(p))
            j["buffers"].push_back({{"phase", b.phase}, {"name", b.name}, {"what", b.what}, {"shape", b.shape},
                                    {"dtype", b.dtype}, {"each_bytes", b.each}, {"count", b.count},
                                    {"bytes", b.bytes()}});
        }
        if (fit > 0) {
          j["fit_bytes"] = fit;
          j["fit_recompute"] = fits[i] ? nlohmann::ordered_json(model::to_string(*fits[i])) : nullptr;
        }
        all.push_back(j);
      }
    }
    std::cout << (global.json ? dump_json(all, 2) + "\n" : text);
  });
}

}  // namespace ktune::cli
