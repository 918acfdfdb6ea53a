// Model and run-shape options (see model_args.hpp).
#include "cli/model_args.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <iostream>
#include <optional>
#include <vector>

#include "base/env.hpp"
#include "base/error.hpp"
#include "base/safetensors.hpp"
#include "cli/options.hpp"
#include "model/weights.hpp"

namespace ktune::cli {

void add_size_options(CLI::App* cmd, ModelArgs& a) {
  cmd->add_option("--d-model", a.d_model, "Override d_model")
      ->check(integer_at_least(1))
      ->default_str("the model's");
  cmd->add_option("--d-ff", a.d_ff, "Override d_ff")
      ->check(integer_at_least(1))
      ->default_str("the model's");
  cmd->add_option("--layers", a.layers, "Override the number of blocks")
      ->check(integer_at_least(1))
      ->default_str("the model's");
  cmd->add_option("--heads", a.heads, "Override the number of heads")
      ->check(integer_at_least(1))
      ->default_str("the model's");
  cmd->add_option("--vocab", a.vocab, "Override the vocabulary size")
      ->check(integer_at_least(1))
      ->default_str("the model's");
}

void add_threads_option(CLI::App* cmd, ModelArgs& a) {
  cmd->add_option("--threads", a.threads, "CPU threads")->check(thread_count())->default_str("all");
}

void add_model_options(CLI::App* cmd, ModelArgs& a, ShapeDefaults shape) {
  cmd->add_option("--model", a.model,
                  fmt::format("Model size: {}", fmt::join(model::model_names(), ", ")))->capture_default_str();
  add_size_options(cmd, a);
  if (shape.ctx > 0) {
    a.default_ctx = shape.ctx;
    a.default_batch = shape.batch;
    cmd->add_option("--ctx", a.ctx, "Context length")
        ->check(integer_at_least(1))
        ->default_str(std::to_string(shape.ctx));
    cmd->add_option("--batch", a.batch, "Batch size")
        ->check(integer_at_least(1))
        ->default_str(std::to_string(shape.batch));
  }
  add_threads_option(cmd, a);
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

std::string take_from_weights(const CLI::App* cmd, ModelArgs& a, const std::string& weights) {
  if (weights.empty()) return "";
  const SafetensorsReader file(weights);
  const auto& meta = file.metadata();
  const auto given = [&](const char* name) {
    const CLI::Option* o = cmd->get_option_no_throw(name);
    return o != nullptr && o->count() > 0;
  };
  const auto whole = [&](const char* key) -> std::optional<std::int64_t> {
    const auto it = meta.find(key);
    std::int64_t v = 0;
    if (it == meta.end()) return std::nullopt;
    const auto [end, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), v);
    if (ec != std::errc() || end != it->second.data() + it->second.size() || v < 1) return std::nullopt;
    return v;
  };
  std::vector<std::string> took;
  bool sized = given("--model");
  for (const char* name : kSizeOptions) sized |= given(name);
  const auto d_model = whole("d_model"), d_ff = whole("d_ff"), layers = whole("num_layers"),
             heads = whole("num_heads"), vocab = whole("vocab_size");
  if (!sized && meta.count("model") && d_model && d_ff && layers && heads && vocab) {
    const auto names = model::model_names();
    const std::string name = meta.at("model");
    const bool differs = model::differing_size(meta, model_from_args(a), /*absent_differs=*/false).has_value();
    // A named size as it is; another ("custom") as its sizes over the smallest.
    a.model = std::find(names.begin(), names.end(), name) != names.end() ? name : "tiny";
    a.d_model = *d_model, a.d_ff = *d_ff, a.layers = *layers, a.heads = *heads, a.vocab = *vocab;
    if (differs)  // told only where it is not the default
      took.push_back(a.model == name ? "--model " + name
                                     : fmt::format("--d-model {} --d-ff {} --layers {} --heads {} --vocab {}",
                                                   *d_model, *d_ff, *layers, *heads, *vocab));
  }
  if (cmd->get_option_no_throw("--ctx") != nullptr && !given("--ctx"))
    if (const auto ctx = whole("context")) {
      a.ctx = *ctx;
      if (*ctx != a.default_ctx) took.push_back(fmt::format("--ctx {}", *ctx));
    }
  return fmt::format("{}", fmt::join(took, " "));
}

model::RunShape shape_from_args(const ModelArgs& a) {
  model::RunShape s{a.batch ? a.batch : a.default_batch, a.ctx ? a.ctx : a.default_ctx};
  s.recompute = a.recompute.empty()     ? model::Recompute::kBlocks
                : a.recompute == "auto" ? model::Recompute::kNone
                                        : model::parse_recompute(a.recompute);
  s.validate();
  return s;
}

void add_recompute_option(CLI::App* cmd, ModelArgs& a, bool with_auto) {
  std::vector<std::string> levels = {"", "none", "swiglu", "blocks"};
  if (with_auto) levels.push_back("auto");
  cmd->add_option("--recompute", a.recompute,
                  std::string("Activation recomputation, the same math and gradients for less memory. --recompute (or "
                              "--recompute blocks, activation checkpointing): each block keeps only its input and "
                              "first norm, and its forward runs again (up to the SwiGLU) before its backward: about a "
                              "third more compute a step, one block's activations instead of every block's. "
                              "--recompute swiglu: each block keeps all but the SwiGLU's output (tokens x d_ff), "
                              "computed again before its backward: one elementwise op a block") +
                      (with_auto ? ". --recompute auto: the least of none, swiglu and blocks at which the run's "
                                   "memory plan fits in the memory free on its device (the host's for cpu and emu)"
                                 : ""))
      ->expected(0, 1)
      ->default_str("")  // alone, not the captured "none": "" stands for blocks
      ->type_name(with_auto ? "[swiglu|blocks|auto]" : "[swiglu|blocks]")
      ->check(CLI::IsMember(levels));
}

void resolve_recompute(const ModelArgs& a, const model::ModelConfig& config, model::RunShape& shape,
                       const model::BackendOptions& backend, bool quiet, bool forward_backward) {
  if (a.recompute != "auto") return;
  const std::int64_t available = model::available_memory(backend);
  shape.recompute = model::least_recompute(config, shape, backend, available, forward_backward);
  if (quiet) return;
  const auto peak = [&](model::Recompute level) {
    model::RunShape s = shape;
    s.recompute = level;
    const model::MemoryPlan plan = model::plan_run(config, s, backend);
    return forward_backward ? plan.peak_forward_backward() : plan.peak_step();
  };
  const std::string where = backend.backend == "cuda" ? "free on the GPU" : "available on the host";
  const std::int64_t bytes = peak(shape.recompute);
  std::cout << fmt::format("recompute auto: {} ", model::to_string(shape.recompute));
  if (available <= 0)
    std::cout << fmt::format("(the memory {} is not known)\n", where);
  else
    std::cout << fmt::format("({} planned, {} the {} {}{})\n", model::format_bytes(bytes),
                             bytes <= available ? "within" : "more than", model::format_bytes(available), where,
                             shape.recompute == model::Recompute::kNone
                                 ? ""
                                 : fmt::format("; keeping every activation, {}",
                                               model::format_bytes(peak(model::Recompute::kNone))));
}

void add_backend_options(CLI::App* cmd, ModelArgs& a) {
  cmd->add_option("--backend", a.backend,
                  "Where the model runs: cpu (references and OpenBLAS), cuda (a GPU), emu (the cuda path emulated "
                  "on the CPU; slow, for checks)")
      ->check(CLI::IsMember({"cpu", "cuda", "emu"}))
      ->capture_default_str();
  cmd->add_option("--mode", a.mode,
                  "Device backends: eager (one kernel per primitive op at the family defaults, as PyTorch eager; "
                  "training: per-tensor AdamW) or compiled (fused kernels, tuned from --cache; training: fused AdamW)")
      ->check(CLI::IsMember({"eager", "compiled"}))
      ->capture_default_str();
  cmd->add_option("--dtype", a.dtype,
                  "Precision: f32; tf32 (device backends: GEMMs on the tf32 matrix units, and in compiled mode flash "
                  "attention); bf16 (device backends: mixed precision, bf16 activations and GEMM inputs, fp32 "
                  "accumulation, norms, softmax and loss, fp32 master weights and AdamW state). The cpu backend "
                  "runs f32 only")
      ->check(CLI::IsMember({"f32", "tf32", "bf16"}))
      ->capture_default_str();
  cmd->add_option("--cache", a.cache,
                  "Tuned cache file for compiled mode (default: the family defaults); on cuda its GEMM choices are "
                  "written into it (a file not there yet starts empty)")
      ->check(output_file());
  cmd->add_flag("--graph", a.graph,
                "Compiled mode on a device backend: capture the forward's and the backward's launches as a graph "
                "(a CUDA graph; recorded under emu) on their second run and replay it from then on");
  cmd->add_flag("--pdl", a.pdl,
                "Device backends: programmatic dependent launch. Each kernel of a family may start while the "
                "previous kernel finishes and waits for it inside (griddepcontrol), hiding the launch between "
                "them; sm_90 and newer (elsewhere, and under emu, launches are as without it)");
  cmd->add_flag("--nvtx", a.nvtx,
                "NVTX ranges around each phase of a step (forward, backward, optimizer), each block's part and "
                "each op, for Nsight Systems: nsys profile ktune ... --nvtx (every backend; off, they cost nothing)");
}

model::BackendOptions backend_from_args(const ModelArgs& a, unsigned threads) {
  KTUNE_REQUIRE(a.backend != "cpu" || a.mode == "compiled",
                "--mode eager chooses the kernels of --backend cuda or emu; the cpu backend has one path (its "
                "references and OpenBLAS)");
  KTUNE_REQUIRE(a.cache.empty() || (a.backend != "cpu" && a.mode == "compiled"),
                "--cache feeds compiled mode's kernels on --backend cuda or emu; the cpu backend and eager mode take "
                "no tuned cache");
  KTUNE_REQUIRE(!a.graph || (a.backend != "cpu" && a.mode == "compiled"),
                "--graph replays compiled mode's launches on --backend cuda or emu; the cpu backend and eager mode "
                "launch one op at a time");
  // `ktune tune` writes its winners to tuned.json by default; a run that would read them only with --cache says so.
  if (a.cache.empty() && a.backend != "cpu" && a.mode == "compiled" && std::filesystem::exists("tuned.json"))
    std::cerr << "note: compiled mode runs the family defaults; the tuned cache tuned.json here is read with "
                 "--cache tuned.json\n";
  return {.backend = a.backend,
          .mode = model::parse_mode(a.mode),
          .precision = model::parse_precision(a.dtype),
          .cache = a.cache,
          .threads = threads,
          .graphs = a.graph,
          .programmatic = a.pdl,
          .nvtx = a.nvtx};
}

unsigned threads_from_args(const ModelArgs& a) { return a.threads ? a.threads : env::hardware_threads(); }

}  // namespace ktune::cli
