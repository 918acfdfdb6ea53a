// Command-line options that pick a model and a run shape, shared by `train`,
// `eval`, `bench e2e` and `bench memory`.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "model/config.hpp"
#include "model/runtime.hpp"

namespace ktune::cli {

// 0 marks an option that was not given (its default applies); the options
// themselves refuse 0 and negative values, so 0 is never a silent default.
struct ModelArgs {
  std::string model = "tiny";
  std::int64_t d_model = 0, d_ff = 0, layers = 0, heads = 0, vocab = 0;  // 0: the named model's
  std::int64_t ctx = 0, batch = 0;                                       // 0: the command's default
  std::int64_t default_ctx = 0, default_batch = 0;                       // the command's (add_model_options)
  unsigned threads = 0;                                                  // 0: all hardware threads
  std::string backend = "cpu", mode = "compiled", cache;                 // where and how it runs
  std::string dtype = "f32";                                             // the run's precision
  bool graph = false;                                                    // compiled mode: passes as graphs
  bool pdl = false;                                                      // programmatic dependent launch
  bool nvtx = false;                                                     // NVTX ranges, for nsys
  bool deterministic = false;                                            // the same bits run after run
  std::string recompute = "none";                                        // activation recomputation ("": blocks)
};

/// Adds --model, the size overrides (add_size_options), --threads
/// (cli/options.hpp's thread_count()), and, when `shape` has a context (the
/// command's defaults, kept in args and shown by --help), --ctx and --batch
/// to `cmd`.
struct ShapeDefaults {
  std::int64_t ctx = 0, batch = 0;
};
void add_model_options(CLI::App* cmd, ModelArgs& args, ShapeDefaults shape = {});
/// The size overrides add_size_options adds.
inline constexpr const char* kSizeOptions[] = {"--d-model", "--d-ff", "--layers", "--heads", "--vocab"};

/// Adds --d-model, --d-ff, --layers, --heads, --vocab: positive integers.
void add_size_options(CLI::App* cmd, ModelArgs& args);

/// Adds --threads (1..env::kMaxThreads; not given: every hardware thread).
void add_threads_option(CLI::App* cmd, ModelArgs& args, const std::string& description = "CPU threads");

/// The named model with the size flags applied (named "custom" when one
/// changed it); throws kInvalidInput for an unknown name or a bad size.
model::ModelConfig model_from_args(const ModelArgs& args);

/// A weights file (`--weights`: a train --save, --save-best or --checkpoint
/// file) says which model it holds, and a checkpoint, or train's weights,
/// the context it was trained at: where `cmd` was given no --model or size
/// override, its model and sizes are taken from there (the model its
/// metadata names, where one of ktune's, with the sizes it states over it;
/// else a custom model of its sizes, all five stated, or kInvalidInput
/// naming those it lacks), and where it has a --ctx not given, its context.
/// A rope_theta other than the models' is refused (kInvalidInput) first,
/// and sizes that make no model (kInvalidInput naming the file) after.
/// Appends to `notes` the lines a person should read once the run starts:
/// what was taken, as options ("note: --model small --ctx 256 from the
/// metadata of F"), and a head count the file does not state.
void take_from_weights(const CLI::App* cmd, ModelArgs& args, const std::string& weights, std::string& notes);
/// The seed `weights` were trained at (their metadata's "seed", as `train
/// --save` and checkpoints write it), where `eval` reads what their run read
/// with it: with `with_tokens` (eval --tokens) always, the run's seed drawing
/// the run's batches of a file (with --val-split, those its validation read);
/// without, where their "tokens" names no file (the synthetic stream they
/// were trained on). nullopt for weights that say no seed, or, without
/// `with_tokens`, that were trained on a token file.
std::optional<std::uint64_t> recorded_seed(const std::string& weights, bool with_tokens);

/// Adds --recompute [swiglu|blocks] (RunShape::recompute; alone: blocks) to
/// a command that trains or plans a training run; with `with_auto` (a
/// command that runs one) also --recompute auto (resolve_recompute).
void add_recompute_option(CLI::App* cmd, ModelArgs& args, bool with_auto);

/// --ctx/--batch, or the command's defaults (ModelArgs::default_ctx,
/// default_batch), and --recompute (auto: none, until resolve_recompute).
model::RunShape shape_from_args(const ModelArgs& args);

/// With --recompute auto, sets shape.recompute to the least recomputation
/// at which the run fits in the memory its backend has now
/// (model::least_recompute, for what the run allocates: a step's, or a
/// forward and backward's without the optimizer's state) and, unless
/// `quiet`, says on stdout which and why. Without auto, does nothing.
void resolve_recompute(const ModelArgs& args, const model::ModelConfig& config, model::RunShape& shape,
                       const model::BackendOptions& backend, bool quiet,
                       model::Allocation allocation = model::Allocation::kTrain);

/// Adds --backend (cpu | cuda | emu), --mode (eager | compiled), --dtype
/// (f32 | tf32 | bf16), --cache (a tuned cache file for compiled mode),
/// --graph (compiled mode's passes replayed as graphs) and --pdl
/// (programmatic dependent launch).
void add_backend_options(CLI::App* cmd, ModelArgs& args);

/// Adds --deterministic (BackendOptions::deterministic) to a command that
/// runs a backward pass.
void add_deterministic_option(CLI::App* cmd, ModelArgs& args);

/// The backend options given, with `threads` for the cpu backend and
/// --threads as given for the emulation's workers (not given: every
/// hardware thread); throws kInvalidInput for --cache or --graph without
/// compiled mode on a device backend. Compiled mode on a device backend
/// without --cache notes on stderr a tuned.json in the working folder
/// (`ktune tune`'s default cache), which it does not read.
model::BackendOptions backend_from_args(const ModelArgs& args, unsigned threads);

/// --threads, or every hardware thread.
unsigned threads_from_args(const ModelArgs& args);

/// A runtime's warnings (stale or unusable tuned entries; on a GPU, GEMM
/// choices the tuned cache could not give or keep, found as the GEMMs first
/// run) from the `from`-th on, each a "warning: " line on stderr; returns how
/// many it has, the `from` of a later call that says the new ones.
std::size_t print_warnings(const model::Runtime& rt, std::size_t from = 0);

/// Where a runtime's kernels' configs came from, as a line says it ("emulated sm_90: compiled mode, f32, 16
/// kernels: ..."); "" on the cpu backend, which launches none.
std::string kernels_line(const model::Runtime& rt);

}  // namespace ktune::cli
