// Training, evaluation and generation loops on any backend
// (model/runtime.hpp), for `ktune train`, `ktune eval` and `ktune generate`
// (which only parse arguments and print).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "model/checkpoint.hpp"
#include "model/config.hpp"
#include "model/runtime.hpp"
#include "templates/adamw/reference.hpp"

namespace ktune::model {

/// What a run reads. Tokens come from `tokens_file` (uint16) when set, else
/// the synthetic stream.
struct RunOptions {
  ModelConfig model;
  RunShape shape{4, 32};
  unsigned threads = 1;
  BackendOptions backend;           ///< where it runs (its threads are `threads`)
  std::uint64_t seed = 0;           ///< parameter init and batch sampling
  std::string weights;              ///< safetensors to start from (empty: init)
  std::string tokens_file;          ///< uint16 tokens (empty: synthetic)
  /// The last fraction of tokens_file held out (split_tokens; 0: none):
  /// train draws its batches from the rest and validates on it; evaluate
  /// evaluates it.
  double val_split = 0;
  /// Sees the runtime once it is built, before it runs (its kernel summary
  /// and warnings, say); empty: nothing.
  std::function<void(const Runtime&)> on_runtime;
  /// Sees it once train, evaluate, evaluate_all or generate has run it: what
  /// the run found on the way (a GPU's GEMM choices and their warnings, the
  /// graphs it captured).
  std::function<void(const Runtime&)> on_finish;
};

/// options.backend with its threads: the run's backend (make_runtime, plan_run).
BackendOptions run_backend(const RunOptions& options);

/// The learning rate of each optimizer step, as CS336's
/// get_lr_cosine_schedule at iteration it = step - 1 (steps count from 1):
/// lr * it / warmup while it < warmup; then lr (constant), or (cosine)
/// min_lr + (lr - min_lr) * (1 + cos(pi * (it - warmup) / (cycle - warmup))) / 2
/// up to it = cycle, and min_lr after.
struct LrSchedule {
  bool cosine = false;
  std::int64_t warmup = 0;  ///< steps of linear warmup from 0
  float min_lr = 0.0f;      ///< cosine: the rate it decays to
  std::int64_t cycle = 0;   ///< cosine: the iteration it reaches min_lr at (0: the run's steps)

  /// The rate of step `step` for the peak rate `lr`, with cycle resolved.
  float at(std::int64_t step, float lr) const;
};

struct TrainOptions : RunOptions {
  std::int64_t steps = 100;
  /// AdamW, after clipping the gradients by global L2 norm 1.0 (the CS336
  /// training loop's gradient clipping; max_grad_norm 0 turns it off).
  /// hyper.lr is the schedule's peak.
  templates::adamw::AdamwHyper hyper{3e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, 1.0f};
  LrSchedule schedule;
  std::string save;                 ///< safetensors written after the last step (empty: none)
  /// Safetensors of the weights after each validation whose loss is the
  /// lowest of the run so far (a resumed run's best is its checkpoint's);
  /// empty: none. Needs eval_every.
  std::string save_best;
  /// Checkpoint file (model/checkpoint.hpp), written every checkpoint_every
  /// steps and after the last one (or a stop); empty: none.
  std::string checkpoint;
  std::int64_t checkpoint_every = 0;  ///< 0: only after the last step
  /// Start from `checkpoint` where the file exists (its weights, optimizer
  /// state, step and batch sampler; `weights` is then not read), else from
  /// the beginning.
  bool resume = false;
  /// Validation every eval_every steps (0: none) and after the last step:
  /// the mean loss of eval_batches batches of val_tokens_file (empty: of
  /// the part val_split holds out, else of the training stream), drawn by
  /// a sampler of their own seeded alike each
  /// time, so every evaluation reads the same batches.
  std::string val_tokens_file;
  std::int64_t eval_every = 0;
  std::int64_t eval_batches = 4;
  /// Asked after each step; true stops the run there (a checkpoint, if one is
  /// kept, is written first). Empty: never.
  std::function<bool()> should_stop;
};

struct StepRecord {
  std::int64_t step = 0;  ///< from 1
  double loss = 0;        ///< loss of the step's batches before its update (their micro-batches' mean)
  double lr = 0;          ///< the learning rate of this step's update
  /// The global L2 norm of the step's gradients before clipping (where the step clipped).
  std::optional<double> grad_norm;
  double seconds = 0;     ///< forward + backward + AdamW
  std::int64_t tokens = 0;  ///< the tokens the step learned from: every micro-batch's
  double tokens_per_s() const { return static_cast<double>(tokens) / seconds; }
  bool checkpointed = false;  ///< a checkpoint was written after this step
  std::optional<double> val_loss;  ///< the validation loss after this step, where one was measured
  bool saved_best = false;         ///< the validation loss was the lowest so far: save_best written
  std::optional<LaunchCount> launches;  ///< what this step launched (device backends)
};

/// What a training run starts from, as `train` has read it: the runtime,
/// the tokens of its training stream and of the part val_split holds out
/// (0: none), and the checkpoint it resumes, if it does.
struct TrainStart {
  const Runtime& runtime;
  std::int64_t train_tokens = 0;
  std::int64_t held_out_tokens = 0;
  std::optional<CheckpointInfo> resumed;
};

/// Trains up to step options.steps (from step 1, or after a resumed
/// checkpoint's); calls on_step after each (before the step's checkpoint,
/// when it has one, is written). `on_start` sees the run once
/// its runtime is built (its kernel summary, say). Throws kInvalidInput for a
/// schedule that cannot run (cosine with cycle <= warmup, min_lr > lr), a
/// checkpoint to resume from that is not one of this model's or was trained
/// under another seed; kCheckFailed when a step's loss is not finite (before
/// that step's update: the checkpoint keeps the last one written, and the
/// training stops rather than overwrite it with diverged weights).
std::vector<StepRecord> train(const TrainOptions& options, const std::function<void(const StepRecord&)>& on_step = {},
                              const std::function<void(const TrainStart&)>& on_start = {});

/// The optimizer's and the learning-rate schedule's settings of a run, as
/// the options that give them ("--lr" → "0.003", ...; the cosine's end
/// resolved), its backend, and on a device backend its mode, dtype and
/// whether it is deterministic: what a checkpoint records, so a resume that
/// changes them is told.
std::map<std::string, std::string> train_settings(const TrainOptions& options);

/// The batches a run's validations average, in words ("4 batches of 2 x 32
/// windows of val.bin"), where it validates (else ""): what a checkpoint
/// records beside train_settings, so a resume that validates on others is
/// told that its losses, and the checkpoint's best, do not compare.
std::string validation_setting(const TrainOptions& options);
/// The key of validation_setting among a checkpoint's settings.
inline constexpr const char* kValidationSetting = "validation";

struct EvalResult {
  double loss = 0;
  std::vector<std::pair<std::string, double>> grad_norms;  ///< L2 norm per parameter, state-dict order
  double grad_norm_total = 0;                              ///< L2 norm of all gradients
  std::optional<LaunchCount> launches;                     ///< what the forward (+ backward) launched (device backends)
};

/// Mean loss of the first `batches` batches the sampler draws for
/// options.seed (of a part val_split holds out: those training's validation
/// reads, so batches = eval_batches gives its validation loss); with
/// `gradients` (one batch only), also the per-parameter
/// gradient norms. Throws kInvalidInput for batches < 1, or gradients of more
/// than one batch.
EvalResult evaluate(const RunOptions& options, bool gradients, std::int64_t batches = 1);

struct FullEvalResult {
  double loss = 0;           ///< the mean loss over every token of every window
  std::int64_t windows = 0;  ///< windows of context tokens, back to back from the stream's start
  std::int64_t tokens = 0;   ///< windows x context
  std::int64_t unscored = 0;  ///< tokens after the last window that could be predicted: fewer than context
  std::int64_t batch = 0;     ///< windows a forward: the options' batch, at most `windows`
};

/// The loss over the whole stream (the tokens file, or the part val_split
/// holds out): every window [i C, (i + 1) C) with its next-token targets, C
/// = shape.context, for i < (size - 1) / C, each token once; shape.batch
/// windows a forward, the last batch filled up with copies of its first
/// window, whose losses are not counted. Throws kInvalidInput for the
/// synthetic stream (it repeats forever) or a stream shorter than a window.
FullEvalResult evaluate_all(const RunOptions& options);

/// What `generate` continues and how: CS336's decoding. The model runs
/// forward-only on one sequence of shape.context tokens (shape.batch is
/// not read).
struct GenerateOptions : RunOptions {
  std::vector<std::int32_t> prompt;  ///< token ids, at least one
  std::int64_t max_tokens = 32;      ///< tokens to draw at most
  double temperature = 1.0;          ///< softmax(logits / temperature); 0: the most likely token (greedy)
  double top_p = 1.0;                ///< nucleus sampling: draw among the fewest likeliest tokens holding top_p
  std::optional<std::int32_t> eos;   ///< stop after drawing this token (it is kept)
};

/// One token drawn from `logits` (vocab values): the argmax (the first of
/// equal ones) when temperature is 0, else from softmax(logits /
/// temperature) restricted to the smallest set of likeliest tokens whose
/// probability reaches top_p (ties broken by the lower id), renormalised;
/// where the largest logit is infinite, the tokens at it share the whole
/// probability (the softmax's limit).
/// Throws kInvalidInput for a temperature below 0 or top_p outside (0, 1],
/// kCheckFailed for logits holding NaN.
std::int32_t sample_token(std::span<const float> logits, double temperature, double top_p, std::mt19937_64& rng);

/// Continues options.prompt by up to max_tokens tokens, each from one
/// forward over the sequence's last shape.context tokens (the window slides
/// once the sequence is longer; a window of the prompt's and the tokens'
/// length when that is shorter), drawn by sample_token with a generator
/// seeded by options.seed; `on_token` sees each token as it is drawn.
/// Returns the drawn tokens. Throws kInvalidInput, before the model is
/// built, for an empty prompt, a token or eos outside the vocabulary, or
/// max_tokens < 1.
std::vector<std::int32_t> generate(const GenerateOptions& options,
                                   const std::function<void(std::int32_t)>& on_token = {});

}  // namespace ktune::model
