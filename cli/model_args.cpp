// Model and run-shape options (see model_args.hpp).
#include "cli/model_args.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <optional>
#include <vector>

#include "base/env.hpp"
#include "base/error.hpp"
#include "base/json_input.hpp"
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

void add_threads_option(CLI::App* cmd, ModelArgs& a, const std::string& description) {
  cmd->add_option("--threads", a.threads, description)->check(thread_count())->default_str("all");
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
  add_threads_option(cmd, a, "CPU threads (under --backend emu, the emulation's: OS threads running blocks)");
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

void take_from_weights(const CLI::App* cmd, ModelArgs& a, const std::string& weights, std::string& notes) {
  if (weights.empty()) return;
  const SafetensorsReader file(weights);
  const auto& meta = file.metadata();
  const auto given = [&](const char* name) {
    const CLI::Option* o = cmd->get_option_no_throw(name);
    return o != nullptr && o->count() > 0;
  };
  // A positive whole number, written as one or as a float ("64.0", as Python's str() writes a float).
  const auto whole = [](const std::string& text) -> std::optional<std::int64_t> {
    double v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size() || !(v >= 1 && v <= 1e15) || v != std::floor(v))
      return std::nullopt;
    return static_cast<std::int64_t>(v);
  };
  // No option sets rope_theta: weights of another are refused before anything is taken from them.
  const model::ModelConfig before = model_from_args(a);
  model::require_rope_theta(meta, before, weights);
  std::vector<std::string> took;
  bool sized = given("--model");
  for (const char* name : kSizeOptions) sized |= given(name);
  if (!sized) {
    struct Size {
      const char* key;
      const char* option;
      std::int64_t* field;
    };
    const Size sizes[] = {{"vocab_size", "--vocab", &a.vocab},    {"d_model", "--d-model", &a.d_model},
                          {"d_ff", "--d-ff", &a.d_ff},            {"num_layers", "--layers", &a.layers},
                          {"num_heads", "--heads", &a.heads}};
    std::vector<std::pair<std::int64_t*, std::int64_t>> stated;
    std::vector<std::string> missing, missing_options;
    for (const Size& size : sizes) {
      const auto it = meta.find(size.key);
      if (it == meta.end()) {
        missing.push_back(size.key);
        missing_options.push_back(size.option);
        continue;
      }
      const auto v = whole(it->second);
      KTUNE_REQUIRE(v, fmt::format("the metadata of {} gives {} as '{}', not a positive whole number; give the "
                                   "model's sizes (--model, or {} and the others)",
                                   weights, size.key, it->second, size.option));
      stated.emplace_back(size.field, *v);
    }
    const auto names = model::model_names();
    const auto named = meta.find("model");
    const bool known = named != meta.end() && std::find(names.begin(), names.end(), named->second) != names.end();
    // The sizes of one of ktune's models where the file names it (those it states over them); a file that
    // names none, every size, as a custom model: the size options' over the smallest.
    KTUNE_REQUIRE(known || missing.empty() || stated.empty(),
                  fmt::format("the metadata of {} states {} but not {} of its model: give the sizes the weights "
                              "were trained at ({}, or --model)",
                              weights, stated.size() == 1 ? "one size" : fmt::format("{} sizes", stated.size()),
                              fmt::join(missing, ", "), fmt::join(missing_options, ", ")));
    if (known || missing.empty()) {
      a.model = known ? named->second : "tiny";
      for (const auto& [field, v] : stated) *field = v;
      const model::ModelConfig after = [&] {
        try {
          return model_from_args(a);
        } catch (const Error& e) {
          if (e.kind() != ErrorKind::kInvalidInput) throw;
          throw_error(ErrorKind::kInvalidInput,
                      fmt::format("the metadata of {} gives sizes that make no model: {}", weights, e.what()));
        }
      }();
      if (after.name != before.name || model::differing_size(model::weights_metadata(after), before, false))
        took.push_back(after.name == a.model ? "--model " + a.model
                                             : fmt::format("{}--d-model {} --d-ff {} --layers {} --heads {} --vocab {}",
                                                           a.model == "tiny" ? "" : "--model " + a.model + " ",
                                                           after.d_model, after.d_ff, after.layers, after.heads,
                                                           after.vocab));
    }
  }
  if (cmd->get_option_no_throw("--ctx") != nullptr && !given("--ctx"))
    if (const auto it = meta.find("context"); it != meta.end()) {
      const auto ctx = whole(it->second);
      KTUNE_REQUIRE(ctx, fmt::format("the metadata of {} gives context as '{}', not a positive whole number; give "
                                     "the context to run at (--ctx)",
                                     weights, excerpt(it->second)));
      a.ctx = *ctx;
      if (*ctx != a.default_ctx) took.push_back(fmt::format("--ctx {}", *ctx));
    }
  // No tensor's shape tells the head count: weights whose metadata states none, nor names one of ktune's models
  // (PyTorch's save_file(model.state_dict())), run at the model's, which the command line should give.
  const auto names = model::model_names();
  const auto named = meta.find("model");
  const bool known = named != meta.end() && std::find(names.begin(), names.end(), named->second) != names.end();
  if (!took.empty()) notes += fmt::format("note: {} from the metadata of {}\n", fmt::join(took, " "), weights);
  if (!known && meta.find("num_heads") == meta.end() && !given("--heads"))
    notes += fmt::format("note: {} states no head count (no num_heads in its metadata): running at --heads {}, "
                         "the model's; give --heads as the weights were trained\n",
                         weights, model_from_args(a).heads);
}

std::optional<std::uint64_t> recorded_seed(const std::string& weights, bool with_tokens) {
  if (weights.empty()) return std::nullopt;
  const SafetensorsReader file(weights);
  const auto& meta = file.metadata();
  const auto tokens = meta.find("tokens"), seed = meta.find("seed");
  if (seed == meta.end() || (!with_tokens && (tokens == meta.end() || !tokens->second.empty()))) return std::nullopt;
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(seed->second.data(), seed->second.data() + seed->second.size(), v);
  KTUNE_REQUIRE(ec == std::errc() && end == seed->second.data() + seed->second.size(),
                fmt::format("the metadata of {} gives seed as '{}', not a whole number; give --seed", weights,
                            excerpt(seed->second)));
  return v;
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
                       const model::BackendOptions& backend, bool quiet, model::Allocation allocation) {
  if (a.recompute != "auto") return;
  const std::int64_t available = model::available_memory(backend);
  shape.recompute = model::least_recompute(config, shape, backend, available, allocation);
  if (quiet) return;
  const auto peak = [&](model::Recompute level) {
    model::RunShape s = shape;
    s.recompute = level;
    return model::plan_run(config, s, backend).peak(allocation);
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

void add_deterministic_option(CLI::App* cmd, ModelArgs& a) {
  cmd->add_flag("--deterministic", a.deterministic,
                "Device backends: the same bits run after run (with the same --cache). Kernels whose sums run "
                "in the order their blocks finish (fp32 atomics: attention_bwd's dQ at dq_atomic 1 or 2, "
                "embedding_bwd at deterministic 0, eager mode's index_add_) take the nearest config that sums in a "
                "fixed order, and on cuda no GEMM algorithm is chosen by timing (the cache's, else the "
                "heuristic's first). The cpu backend's runs repeat without it, at any --threads");
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
  // A cache only the cuda backend writes (its GEMM choices): elsewhere one not there is a mistyped path.
  if (!a.cache.empty() && !std::filesystem::exists(a.cache)) {
    KTUNE_REQUIRE(a.backend == "cuda", fmt::format("--cache {} does not exist; the {} backend only reads a tuned "
                                                   "cache (`ktune tune` writes one)",
                                                   a.cache, a.backend));
    std::cerr << fmt::format("note: --cache {} does not exist yet: every kernel runs at its family default{}\n",
                             a.cache, a.deterministic ? "" : ", and the GEMMs' timed choices go into it");
  }
  // `ktune tune` writes its winners to tuned.json by default; a run that would read them only with --cache says so.
  if (a.cache.empty() && a.backend != "cpu" && a.mode == "compiled" && std::filesystem::exists("tuned.json"))
    std::cerr << "note: compiled mode runs the family defaults; the tuned cache tuned.json here is read with "
                 "--cache tuned.json\n";
  return {.backend = a.backend,
          .mode = model::parse_mode(a.mode),
          .precision = model::parse_precision(a.dtype),
          .cache = a.cache,
          .threads = threads,
          .emu_workers = a.threads,
          .graphs = a.graph,
          .programmatic = a.pdl,
          .nvtx = a.nvtx,
          .deterministic = a.deterministic};
}

unsigned threads_from_args(const ModelArgs& a) { return a.threads ? a.threads : env::hardware_threads(); }

std::size_t print_warnings(const model::Runtime& rt, std::size_t from) {
  const std::vector<std::string> warnings = rt.warnings();  // the GEMMs' come last, as they are found
  for (std::size_t i = from; i < warnings.size(); ++i) std::cerr << "warning: " << warnings[i] << "\n";
  return warnings.size();
}

std::string kernels_line(const model::Runtime& rt) {
  return rt.kernel_summary().empty() ? "" : rt.device() + ": " + rt.kernel_summary();
}

}  // namespace ktune::cli
