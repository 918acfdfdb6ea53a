// `ktune train`: trains the Transformer on a backend (cpu, cuda, emu) and
// prints the loss per step (synthetic learnable tokens unless --tokens is given).
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <string_view>
#include <limits>
#include <optional>
#include <utility>
#include <vector>
#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "base/files.hpp"
#include "base/json_output.hpp"
#include "cli/commands.hpp"
#include "cli/model_args.hpp"
#include "cli/options.hpp"
#include "cli/progress.hpp"
#include "cli/stop_signals.hpp"
#include "model/checkpoint.hpp"
#include "model/data.hpp"
#include "model/memory_plan.hpp"
#include "model/train.hpp"
#include "search/winner.hpp"

namespace ktune::cli {

namespace {

/// The step of a --metrics line, or nullopt for a line that is no step record.
std::optional<std::int64_t> record_step(const std::string& line) {
  const auto record = nlohmann::json::parse(line, nullptr, false);
  if (!record.is_object() || !record.contains("step") || !record["step"].is_number_integer()) return std::nullopt;
  return record["step"].get<std::int64_t>();
}

/// Refuses a --metrics file that is not a run's records (JSON objects with a
/// step, one a line; the last may be one cut short by a kill or a full disk:
/// no newline after it, and the start of a record, as short as its "{"): a
/// resumed run would rewrite it, a new one replace it.
void check_metrics(const std::filesystem::path& path) {
  if (!std::filesystem::exists(path)) return;
  const std::string text = read_file(path);
  std::istringstream lines(text);
  std::vector<std::string> all;
  for (std::string line; std::getline(lines, line);) all.push_back(line);
  const bool cut = !text.empty() && text.back() != '\n' && !all.back().empty() &&
                   std::string_view("{\"").starts_with(std::string_view(all.back()).substr(0, 2));
  for (std::size_t i = 0; i < all.size() && (i + 1 < all.size() || !cut); ++i) {
    KTUNE_REQUIRE(record_step(all[i]).has_value(),
                  fmt::format("--metrics {}: line {} is no step record of a ktune run; give the run's metrics file, "
                              "or another path",
                              path.string(), i + 1));
  }
}

// A resumed run's --metrics file before it appends from `first_step` on: the
// lines of steps at or past it (taken after the checkpoint by a run killed
// since) and a line cut short by the kill are dropped, so each step is in it once.
void trim_metrics(const std::filesystem::path& path, std::int64_t first_step) {
  if (!std::filesystem::exists(path)) return;
  std::istringstream lines(read_file(path));
  std::string kept;
  for (std::string line; std::getline(lines, line);) {
    const auto step = record_step(line);
    if (step && *step < first_step) kept += line + "\n";
  }
  write_file_atomic(path, kept);
}

// The plan's peak for a step of the run: weights, gradients, AdamW state,
// activations (as the run keeps them) and workspace, each in its dtype.
std::int64_t plan_peak(const model::TrainOptions& t) {
  return model::plan_run(t.model, t.shape, model::run_backend(t)).peak_step();
}

// A step's record for --json and --metrics.
nlohmann::json step_json(const model::StepRecord& r) {
  nlohmann::json j = {{"step", r.step},       {"loss", r.loss},
                      {"lr", r.lr},           {"seconds", r.seconds},
                      {"tokens", r.tokens},   {"tokens_per_s", r.tokens_per_s()},
                      {"checkpointed", r.checkpointed}};
  if (r.grad_norm) j["grad_norm"] = *r.grad_norm;
  if (r.val_loss) j["val_loss"] = *r.val_loss;
  if (r.saved_best) j["saved_best"] = true;
  if (r.launches) j["launches"] = {{"kernels", r.launches->kernels}, {"gemms", r.launches->gemms}};
  return j;
}

// Whether the checkpoint file holds `step`: a write that failed left the one before it, or none.
bool checkpoint_holds(const model::TrainOptions& t, std::int64_t step) {
  try {
    return model::read_checkpoint_info(t.checkpoint, t.model).step == step;
  } catch (const Error&) {
    return false;
  }
}

// Puts `r`'s record in place of the last line of the --metrics file `metrics` (closed here) writes to `path`,
// where that line is `written` (as it went out); else leaves the file as it is.
void rewrite_last_metrics(std::ofstream& metrics, const std::filesystem::path& path, const std::string& written,
                          const model::StepRecord& r) {
  metrics.close();
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec || size < written.size()) return;
  std::string tail(written.size(), '\0');
  std::ifstream in(path, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(size - written.size()));
  if (!in.read(tail.data(), static_cast<std::streamsize>(tail.size())) || tail != written) return;
  in.close();
  std::filesystem::resize_file(path, size - written.size(), ec);
  if (!ec) std::ofstream(path, std::ios::app) << step_json(r).dump() << "\n";
}

}  // namespace

void add_train_command(CLI::App& app, Global& global) {
  struct Opts {
    ModelArgs m;
    model::TrainOptions t;
    std::string schedule = "constant";
    std::string metrics;
    std::int64_t accumulate = 1;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("train", "Train the Transformer LM, printing the loss per step");
  add_model_options(cmd, o->m, {.ctx = 32, .batch = 4});
  add_backend_options(cmd, o->m);
  add_deterministic_option(cmd, o->m);
  add_recompute_option(cmd, o->m, true);
  cmd->add_option("--steps", o->t.steps, "Optimizer steps")->check(integer_at_least(1))->capture_default_str();
  cmd->add_option("--accumulate", o->accumulate,
                  "Micro-batches per optimizer step (gradient accumulation): each step runs this many forwards and "
                  "backwards of --batch windows each and sums their gradients into one AdamW update, so a step "
                  "learns from N x --batch windows (the gradient of their mean loss) in the activation memory of "
                  "--batch")
      ->check(integer_at_least(1))
      ->capture_default_str();
  cmd->add_option("--weights", o->t.weights,
                  "Start from these safetensors weights (default: random init; without --model or a size override, "
                  "the model it holds, and without --ctx, the context it was trained at)")
      ->check(input_file());
  cmd->add_option("--save", o->t.save,
                  "Write the trained weights here (safetensors) after the last step, or after the step running "
                  "when SIGINT, SIGTERM, SIGHUP or SIGPIPE arrives, which then ends the run (exit status 128 + the "
                  "signal)")
      ->check(output_file());
  auto* save_best = cmd->add_option("--save-best", o->t.save_best,
                                    "Write the weights here (safetensors) after each validation whose loss is the "
                                    "lowest so far (with --resume, the checkpoint's best counts)")
                        ->check(output_file());
  auto* tokens = cmd->add_option("--tokens", o->t.tokens_file,
                                 "Token file: raw uint16, or a .npy integer array (default: a synthetic learnable "
                                 "stream)")
                    ->check(input_file());
  auto* eval_every = cmd->add_option("--eval-every", o->t.eval_every,
                                     "Validation loss every this many steps and after the last; 0: none")
                         ->check(integer_at_least(0))
                         ->capture_default_str();
  cmd->add_option("--eval-batches", o->t.eval_batches,
                  "Batches (of --batch windows each) a validation averages, the same ones every time")
      ->check(integer_at_least(1))
      ->capture_default_str()
      ->needs(eval_every);
  auto* val_tokens = cmd->add_option("--val-tokens", o->t.val_tokens_file,
                                     "Token file to validate on, as --tokens (default: the part --val-split holds out, "
                                     "else the training stream)")
                         ->check(input_file())
                         ->needs(eval_every);
  save_best->needs(eval_every);
  cmd->add_option("--val-split", o->t.val_split,
                  "Hold out the last fraction of --tokens (whole tokens, rounded): training draws its windows from "
                  "the rest and validates on it")
      ->check(finite_in(0, 1, true, true))
      ->default_str("none")
      ->needs(tokens)
      ->needs(eval_every)
      ->excludes(val_tokens);
  // AdamW takes its hyper-parameters in fp32, where a larger value than fp32's largest is inf.
  cmd->add_option("--lr", o->t.hyper.lr, "AdamW learning rate")->check(fp32_at_least(0))
      ->capture_default_str();
  cmd->add_option("--beta1", o->t.hyper.beta1, "AdamW beta1")->check(finite_in(0, 1, false, true))
      ->capture_default_str();
  cmd->add_option("--beta2", o->t.hyper.beta2, "AdamW beta2")->check(finite_in(0, 1, false, true))
      ->capture_default_str();
  cmd->add_option("--eps", o->t.hyper.eps, "AdamW epsilon")->check(fp32_at_least(0, true))
      ->capture_default_str();
  cmd->add_option("--weight-decay", o->t.hyper.weight_decay, "AdamW decoupled weight decay")
      ->check(fp32_at_least(0))
      ->capture_default_str();
  cmd->add_option("--clip-norm", o->t.hyper.max_grad_norm,
                  "Clip the gradients by their global L2 norm to at most this before each AdamW step (each step's "
                  "line shows the norm before clipping); 0: no clipping, and no norm is taken or shown (a bound no "
                  "norm reaches, such as 1e30, shows it unclipped)")
      ->check(fp32_at_least(0))
      ->capture_default_str();
  cmd->add_option("--lr-schedule", o->schedule,
                  "Learning rate per step: constant (--lr after the warmup), or cosine (CS336's cosine schedule: from "
                  "--lr down to --min-lr over --cosine-steps)")
      ->check(CLI::IsMember({"constant", "cosine"}))
      ->capture_default_str();
  cmd->add_option("--warmup-steps", o->t.schedule.warmup,
                  "Steps of linear warmup from 0 to --lr (step s runs at lr * (s - 1) / warmup, as CS336's schedule "
                  "at iteration s - 1)")
      ->check(integer_at_least(0))
      ->capture_default_str();
  auto* min_lr = cmd->add_option("--min-lr", o->t.schedule.min_lr, "Cosine schedule: the learning rate it decays to")
                     ->check(fp32_at_least(0))
                     ->capture_default_str();
  auto* cosine_steps = cmd->add_option("--cosine-steps", o->t.schedule.cycle,
                                       "Cosine schedule: it reaches --min-lr at iteration N (step N + 1) and stays "
                                       "there")
                           ->check(integer_at_least(1))
                           ->default_str("--steps");
  cmd->add_option("--seed", o->t.seed,
                  "Seed of the initialisation, the batch sampler and, without --tokens, the synthetic token stream")
      ->check(integer_at_least(0))
      ->capture_default_str();
  auto* checkpoint = cmd->add_option("--checkpoint", o->t.checkpoint,
                                     "Checkpoint file (safetensors: the weights, AdamW's state, the step and the batch "
                                     "sampler), written atomically every --checkpoint-every steps, after the last "
                                     "step, and after the step running when SIGINT, SIGTERM, SIGHUP or SIGPIPE "
                                     "arrives, which then ends the run (exit status 128 + the signal)")
                        ->check(output_file());
  cmd->add_option("--checkpoint-every", o->t.checkpoint_every, "Steps between checkpoints; 0: after the last step only")
      ->check(integer_at_least(0))
      ->capture_default_str()
      ->needs(checkpoint);
  cmd->add_flag("--resume", o->t.resume,
                "Go on from --checkpoint where the file exists (its model, and context, where no --model, size "
                "override or --ctx is given; the same seed and tokens; steps up to --steps; --weights is not read "
                "then), else start at step 1")
      ->needs(checkpoint);
  cmd->add_option("--metrics", o->metrics,
                  "JSON Lines file: each step's record (as in --json) written and flushed as the step ends; "
                  "appended to when the run resumes from a checkpoint (after dropping the lines of steps past it), "
                  "else started anew")
      ->check(output_file());
  cmd->callback([o, cmd, &global, min_lr, cosine_steps] {
    o->t.schedule.cosine = o->schedule == "cosine";
    KTUNE_REQUIRE(o->t.schedule.cosine || (min_lr->count() == 0 && cosine_steps->count() == 0),
                  "--min-lr and --cosine-steps shape the cosine schedule; add --lr-schedule cosine");
    // AdamW runs in fp32: a beta that rounds to 1 or an eps that rounds to 0 there divides by zero.
    KTUNE_REQUIRE(static_cast<float>(o->t.hyper.beta1) < 1.0f && static_cast<float>(o->t.hyper.beta2) < 1.0f,
                  fmt::format("--beta1 and --beta2 must round to below 1 in fp32, where AdamW runs (at most "
                              "0.99999994); they round to {} and {}",
                              static_cast<float>(o->t.hyper.beta1), static_cast<float>(o->t.hyper.beta2)));
    KTUNE_REQUIRE(static_cast<float>(o->t.hyper.eps) >= std::numeric_limits<float>::min(),
                  fmt::format("--eps rounds to {:g} in fp32, where AdamW runs: 0 or subnormal; give at least {:g}",
                              static_cast<float>(o->t.hyper.eps), std::numeric_limits<float>::min()));
    // Validation's options mean nothing without validations.
    for (const char* name : {"--val-tokens", "--val-split", "--eval-batches"})
      KTUNE_REQUIRE(o->t.eval_every > 0 || cmd->get_option(name)->count() == 0,
                    fmt::format("{} shapes the validations of --eval-every N, which is 0 (none); give N > 0", name));
    require_distinct_files({{"--weights", o->t.weights}, {"--tokens", o->t.tokens_file},
                            {"--val-tokens", o->t.val_tokens_file}, {"--cache", o->m.cache}},
                           {{"--save", o->t.save}, {"--save-best", o->t.save_best}, {"--checkpoint", o->t.checkpoint},
                            {"--metrics", o->metrics}});
    // A run trains the model (and context) of the file it starts from, where the command line does not say, as
    // eval and generate take them: a fresh run's --weights, a resumed run's checkpoint (so the line that started a
    // run from --weights, naming no model, goes on from its checkpoint). Any other file there is refused later.
    const bool resumable = o->t.resume && std::filesystem::exists(o->t.checkpoint);
    const std::string from = !resumable                              ? o->t.weights
                             : model::is_checkpoint(o->t.checkpoint) ? o->t.checkpoint
                                                                     : std::string();
    // Notes are said once the run starts, so that a refusal on the way is its one line.
    std::string notes;
    if (!from.empty()) take_from_weights(cmd, o->m, from, notes);
    // A checkpoint given as --weights starts a new run from its weights alone: said, as a resume would differ.
    if (!o->t.weights.empty() && !o->t.resume && model::is_checkpoint(o->t.weights))
      notes += fmt::format("note: --weights {} is a training checkpoint: this run starts at step 1 from its "
                           "weights, without its AdamW state and step (--checkpoint {} --resume goes on from it)\n",
                           o->t.weights, o->t.weights);
    // Before the training, not after; weights written over a checkpoint would lose its optimizer state and step.
    for (const auto& [option, path] : {std::pair{"--save", o->t.save}, std::pair{"--save-best", o->t.save_best}}) {
      if (path.empty()) continue;
      writable_target(path, option);
      KTUNE_REQUIRE(!model::is_checkpoint(path),
                    fmt::format("{} {} holds a training checkpoint (weights, AdamW state and step): weights written "
                                "over it would lose them; give {} another path (--checkpoint {} --resume goes on "
                                "from it)",
                                option, path, option, path));
    }
    if (!o->t.checkpoint.empty()) writable_target(o->t.checkpoint, "--checkpoint");
    // Checked now, opened at the first step's end: a run refused on the way leaves the file as it was.
    const std::filesystem::path metrics_path = o->metrics.empty() ? "" : writable_target(o->metrics, "--metrics");
    // One run writes a checkpoint and a metrics file at a time.
    std::optional<FileLock> checkpoint_held, metrics_held;
    if (!o->t.checkpoint.empty()) {
      checkpoint_held.emplace(lock_path(o->t.checkpoint), "--checkpoint " + o->t.checkpoint);
      StopSignals::remove_at_once(lock_path(o->t.checkpoint));
    }
    if (!metrics_path.empty()) {
      metrics_held.emplace(lock_path(metrics_path), "--metrics " + o->metrics);
      StopSignals::remove_at_once(lock_path(metrics_path));
    }
    // A run without --resume would write over a checkpoint there: a forgotten --resume lost a run's progress.
    std::error_code ec;
    if (!o->t.checkpoint.empty() && !o->t.resume && std::filesystem::file_size(o->t.checkpoint, ec) > 0 && !ec) {
      std::string holds = "a file";
      try {
        holds = fmt::format("the checkpoint of step {}",
                            model::read_checkpoint_info(o->t.checkpoint, model_from_args(o->m)).step);
      } catch (const Error&) {  // another model's, or no checkpoint: named as a file
      }
      throw_error(ErrorKind::kInvalidInput,
                  fmt::format("--checkpoint {} holds {}: give --resume to go on from it, or remove it (or give "
                              "another path) to start anew",
                              o->t.checkpoint, holds));
    }
    const auto metrics_mode = o->t.resume && std::filesystem::exists(o->t.checkpoint) ? std::ios::app : std::ios::trunc;
    if (!metrics_path.empty()) check_metrics(metrics_path);
    std::ofstream metrics;
    // With somewhere to write the run to, a signal ends it after its step, written there.
    static constexpr const char* kCheckpointHolds =
        "\nktune: stopped at once: the checkpoint holds the run as of its last write, and --resume goes on from it\n";
    const bool checkpoint_there = !o->t.checkpoint.empty() && std::filesystem::exists(o->t.checkpoint);
    StopSignals stop_signals(!o->t.checkpoint.empty() || !o->t.save.empty(),
                             "\nktune: stopping after this step, once it is written (again: stop at once)\n",
                             o->t.save_best.empty()
                                 ? "\nktune: stopped at once: nothing is kept (no --checkpoint or --save)\n"
                                 : "\nktune: stopped at once: no --checkpoint or --save; --save-best's file keeps the "
                                   "weights of the best validation so far, if one came\n",
                             o->t.checkpoint.empty() ? "\nktune: stopped at once: --save is not written\n"
                             : checkpoint_there
                                 ? kCheckpointHolds
                                 : "\nktune: stopped at once: no checkpoint was written yet, so nothing is kept\n");
    model::TrainOptions t = o->t;
    // A --metrics line that cannot be written (a full disk) stops the run as a signal does: its step written.
    std::string metrics_failure;
    t.should_stop = [&stop_signals, &metrics_failure] {
      return stop_signals.caught() != 0 || !metrics_failure.empty();
    };
    t.model = model_from_args(o->m);
    t.shape = shape_from_args(o->m);
    t.shape.micro_batches = o->accumulate;
    t.shape.validate();  // a step of batch x micro-batches windows, refused before it overflows
    t.threads = threads_from_args(o->m);
    t.backend = backend_from_args(o->m, t.threads);
    resolve_recompute(o->m, t.model, t.shape, t.backend, global.json);
    const bool scheduled = t.schedule.cosine || t.schedule.warmup > 0;
    const int step_width = static_cast<int>(std::to_string(t.steps).size());
    // The time left, at the pace since the end of this run's first step
    // (which compiles and warms up): validations and checkpoints included.
    using Clock = std::chrono::steady_clock;
    std::optional<std::pair<std::int64_t, Clock::time_point>> first_end;
    const auto eta = [&t, &first_end](std::int64_t step) -> std::string {
      const auto now = Clock::now();
      if (!first_end) first_end.emplace(step, now);
      if (step == first_end->first || step >= t.steps) return "";
      const double per_step =
          std::chrono::duration<double>(now - first_end->second).count() / static_cast<double>(step - first_end->first);
      return "  eta " + format_duration(per_step * static_cast<double>(t.steps - step));
    };
    ProgressLine json_progress;
    // Under --json, the run's JSON: the steps done, and the error that ended it early if one did.
    std::optional<std::int64_t> resumed_after;
    bool started = false;  // the backend up and the run under way: an error then ends a run, not bad input
    // The runtime while it trains, and its warnings said so far: a GPU's GEMM choices bring theirs at a step.
    const model::Runtime* runtime = nullptr;
    std::size_t warned = 0;
    std::optional<model::Runtime::GraphNodes> graphs;  // the passes' graphs, as the run ends (--graph)
    t.on_finish = [&graphs](const model::Runtime& rt) { graphs = rt.graph_nodes(); };
    const auto print_json = [&](const std::vector<model::StepRecord>& steps, const std::string& error) {
      nlohmann::json j = nlohmann::json::array();
      for (const auto& r : steps) j.push_back(step_json(r));
      const int signal = stop_signals.caught();  // the steps taken before a stop signal ended the run
      nlohmann::json out = {{"model", t.model.name},
                            {"backend", t.backend.backend},
                            {"mode", t.backend.backend == "cpu" ? "reference" : model::to_string(t.backend.mode)},
                            {"dtype", model::to_string(t.backend.precision)},
                            {"context_length", t.shape.context},
                            {"batch_size", t.shape.batch},
                            {"micro_batches", t.shape.micro_batches},
                            {"recompute", model::to_string(t.shape.recompute)},
                            {"plan_peak_bytes", plan_peak(t)},
                            {"resumed_after_step", resumed_after ? nlohmann::json(*resumed_after) : nlohmann::json()},
                            {"steps_planned", t.steps},
                            {"stopped_by", signal != 0 ? nlohmann::json(StopSignals::name(signal)) : nlohmann::json()},
                            {"steps", j}};
      if (graphs) out["graph_nodes"] = {{"forward", graphs->forward}, {"backward", graphs->backward}};
      if (!error.empty()) out["error"] = error;
      std::cout << dump_json(out, 2) << "\n";
    };
    std::vector<model::StepRecord> records, done;
    try {
      records = model::train(
          t,
          [&global, &t, scheduled, &metrics, &metrics_path, metrics_mode, &metrics_failure, step_width, &eta,
           &json_progress, &done, &runtime, &warned](const model::StepRecord& step) {
            // A stop asked by the time a step's lines go out ends the run at that step, its checkpoint written
            // (model::train asks again once they are out, and a stop once asked stays so): the lines say so. One
            // asked while they go out: both are mended after the run (below), so the two always agree.
            model::StepRecord r = step;
            r.checkpointed = r.checkpointed || (!t.checkpoint.empty() && t.should_stop && t.should_stop());
            done.push_back(r);
            if (runtime) warned = print_warnings(*runtime, warned);
            if (r.checkpointed) StopSignals::set_again(kCheckpointHolds);
            if (!metrics_path.empty() && !metrics.is_open() && metrics_failure.empty()) {
              if (metrics_mode == std::ios::app) trim_metrics(metrics_path, r.step);
              metrics.open(open_target(metrics_path, "--metrics"), metrics_mode);
              KTUNE_REQUIRE(metrics.good(), fmt::format("cannot open --metrics {}", metrics_path.string()));
            }
            if (metrics.is_open()) {
              metrics << step_json(r).dump() << "\n" << std::flush;
              if (!metrics) {
                metrics_failure =
                    fmt::format("cannot write --metrics {}: {}", metrics_path.string(), std::strerror(errno));
                metrics.close();
              }
            }
            if (global.json) {  // stdout holds the JSON at the end; on a terminal, the steps go by on stderr
              if (json_progress.terminal())
                json_progress.update(fmt::format("step {}/{}  loss {:.4f}{}", r.step, t.steps, r.loss, eta(r.step)));
              return;
            }
            const double tokens_per_s = r.tokens_per_s();
            std::cout << fmt::format("step {:>{}}/{}  loss {:.4f}  {}{}({:.1f} ms, {:.0f} tokens/s, {:.3g} TFLOP/s)"
                                     "{}{}{}\n",
                                     r.step, step_width, t.steps, r.loss,
                                     r.grad_norm ? fmt::format("norm {:.4f}  ", *r.grad_norm) : "",
                                     scheduled ? fmt::format("lr {:.3e}  ", r.lr) : "", r.seconds * 1e3, tokens_per_s,
                                     tokens_per_s * t.model.train_flops_per_token(t.shape.context) / 1e12,
                                     r.val_loss ? fmt::format("  val loss {:.4f}{}", *r.val_loss,
                                                              r.saved_best ? " (best: saved)" : "")
                                                : "",
                                     r.checkpointed ? fmt::format("  checkpoint {}", t.checkpoint) : "", eta(r.step))
                      << std::flush;
          },
          [&global, &t, &resumed_after, &started, &runtime, &warned, &notes](const model::TrainStart& start) {
            started = true;  // the backend is up
            std::cerr << notes;
            // What the run is goes to stdout, but for --json's; warnings and notes go to stderr either way.
            std::ostringstream discarded;
            std::ostream& out = global.json ? discarded : std::cout;
            if (start.resumed) resumed_after = start.resumed->step;
            const model::Runtime& rt = start.runtime;
            out << fmt::format("training {} (d_model {}, {} layers, {} heads, vocab {}) on {}, ctx {}, batch "
                                     "{}{}{}{}\n",
                                     t.model.name, t.model.d_model, t.model.layers, t.model.heads, t.model.vocab,
                                     t.backend.backend, t.shape.context, t.shape.batch,
                                     t.shape.micro_batches > 1
                                         ? fmt::format(" x {} micro-batches a step ({} windows)", t.shape.micro_batches,
                                                       t.shape.micro_batches * t.shape.batch)
                                         : "",
                                     t.backend.backend == "cpu"
                                         ? fmt::format(", {} thread{}", t.threads, t.threads == 1 ? "" : "s")
                                         : "",
                                     t.shape.recompute == model::Recompute::kNone
                                         ? ""
                                         : fmt::format(", recompute {}", model::to_string(t.shape.recompute)));
            if (!t.tokens_file.empty()) {
              if (start.held_out_tokens > 0) {
                out << fmt::format("tokens: {}, the first {} of {} (the last {} held out for validation)\n",
                                         t.tokens_file, start.train_tokens, start.train_tokens + start.held_out_tokens,
                                         start.held_out_tokens);
              } else {
                out << fmt::format("tokens: {} ({}){}\n", t.tokens_file, start.train_tokens,
                                         t.eval_every > 0 ? fmt::format(", validated on {}", t.val_tokens_file.empty()
                                                                                              ? "the same tokens"
                                                                                              : t.val_tokens_file)
                                                          : "");
              }
            } else {
              out << fmt::format("tokens: the synthetic stream of seed {} (one random sequence of {} tokens, "
                                       "repeated; --tokens F reads a corpus){}\n",
                                       t.seed, model::TokenStream::kSyntheticPeriod,
                                       t.eval_every > 0 ? fmt::format(", validated on {}", t.val_tokens_file.empty()
                                                                                            ? "the same stream"
                                                                                            : t.val_tokens_file)
                                                        : "");
            }
            runtime = &rt;
            warned = print_warnings(rt);
            if (start.resumed) {
              const model::CheckpointInfo& info = *start.resumed;
              out << fmt::format("resuming from {} after step {}\n", t.checkpoint, info.step);
              const auto shape = [](const model::RunShape& s) {
                return fmt::format("ctx {}, batch {}{}", s.context, s.batch,
                                   s.micro_batches > 1 ? fmt::format(" x {} micro-batches", s.micro_batches) : "");
              };
              // A step draws batch x micro-batches windows at once: the same count at the same context draws the
              // same windows, whatever micro-batches they are split into.
              const auto& was = info.shape;
              if (was.batch > 0 && (was.batch * was.micro_batches != t.shape.batch * t.shape.micro_batches ||
                                    was.context != t.shape.context))
                std::cerr << fmt::format("note: {} was trained at {}; this run goes on at {}, so its batches are not "
                                         "those the run would have drawn\n",
                                         t.checkpoint, shape(was), shape(t.shape));
              else if (was.batch > 0 && was.batch != t.shape.batch)
                std::cerr << fmt::format("note: {} was trained at {}; this run goes on at {}: its steps draw the "
                                         "windows the run would have drawn, in micro-batches of another size (the "
                                         "same updates, up to rounding)\n",
                                         t.checkpoint, shape(was), shape(t.shape));
              // Settings the resumed steps take otherwise than the run's (a checkpoint that records them).
              std::vector<std::string> changed;
              for (const auto& [option, value] : model::train_settings(t))
                if (const auto it = info.settings.find(option); it != info.settings.end() && it->second != value)
                  changed.push_back(fmt::format("{} {} (was {})", option, value, it->second));
              if (!changed.empty())
                std::cerr << fmt::format("note: this run goes on with {}: its steps are not those the run would have "
                                         "taken\n",
                                         fmt::join(changed, ", "));
              // Validations on other batches: their losses, and the best that --save-best goes on from, differ.
              const std::string validation = model::validation_setting(t);
              if (const auto it = info.settings.find(model::kValidationSetting);
                  !validation.empty() && it != info.settings.end() && it->second != validation)
                std::cerr << fmt::format(
                    "note: this run validates on {} (was {}): its validation losses do not compare with those "
                    "before step {}{}\n",
                    validation, it->second, info.step + 1,
                    info.best_val_loss && !t.save_best.empty()
                        ? fmt::format(", nor with the best so far, {:.4f}, which --save-best beats to write",
                                      *info.best_val_loss)
                        : "");
            } else if (t.resume) {
              out << fmt::format("no checkpoint at {} yet: starting at step 1\n", t.checkpoint);
            }
            // A device run's ops' scratch (materialised attention's dS, eager chains' temporaries, kernels'
            // workspaces) is planned too.
            const model::MemoryPlan plan = model::plan_run(t.model, t.shape, model::run_backend(t));
            out << fmt::format("memory: {} planned for a step (weights, gradients, AdamW state, activations, "
                               "workspace{})\n",
                               model::format_bytes(plan.peak_step()),
                               std::max(plan.scratch, plan.step_scratch) > 0 ? ", the ops' scratch" : "");
            if (const std::string kernels = kernels_line(rt); !kernels.empty()) out << kernels << "\n";
            out << std::flush;  // before the first step, which may take a while
          });
    } catch (const Error& e) {
      // A step's record goes out before its checkpoint is written: where that write failed (a full disk), the
      // record says so, in the metrics file too, instead of a checkpoint the file does not hold.
      if (!done.empty() && done.back().checkpointed && !checkpoint_holds(t, done.back().step)) {
        const std::string written = step_json(done.back()).dump() + "\n";
        done.back().checkpointed = false;
        if (metrics.is_open()) rewrite_last_metrics(metrics, metrics_path, written, done.back());
      }
      if (global.json && started) print_json(done, e.what());  // a diverged run keeps the steps it took
      throw;
    }
    // A stop that came after the last step's lines went out, before the run asked again, ended the run at that
    // step with its checkpoint written: its --metrics line is rewritten to say so, and stdout says it.
    if (!records.empty() && !done.empty() && records.back().checkpointed && !done.back().checkpointed) {
      const std::string written = step_json(done.back()).dump() + "\n";
      done.back().checkpointed = true;
      if (metrics.is_open()) rewrite_last_metrics(metrics, metrics_path, written, records.back());
      if (!global.json)
        std::cout << fmt::format("step {:>{}}/{}  checkpoint {}\n", records.back().step, step_width, t.steps,
                                 t.checkpoint);
    }
    if (global.json) {
      print_json(records, metrics_failure);
    } else if (!records.empty()) {
      // The median step: the first compiles and warms up, validations and checkpoints are not steps.
      std::vector<double> seconds;
      for (const auto& r : records) seconds.push_back(r.seconds);
      std::sort(seconds.begin(), seconds.end());
      const double median_s = search::percentile(seconds, 0.5);
      std::cout << fmt::format("loss {:.4f} -> {:.4f} over {} step{}; the median step {:.1f} ms, {:.0f} tokens/s\n",
                               records.front().loss, records.back().loss, records.size(),
                               records.size() == 1 ? "" : "s", median_s * 1e3,
                               static_cast<double>(records.back().tokens) / median_s);
      if (records.back().launches)
        std::cout << fmt::format("launches/step: {} ({} mode{})\n", records.back().launches->str(),
                                 model::to_string(t.backend.mode),
                                 graphs ? "; " + graphs->str(false) : "");
    } else {
      std::cout << fmt::format("nothing to train: the checkpoint holds step {}, at or past --steps {}\n",
                               resumed_after.value_or(0), t.steps);
    }
    if (!t.save.empty() && !global.json) std::cout << "saved weights to " << t.save << "\n";
    if (!metrics_failure.empty()) {
      const std::int64_t step = records.empty() ? 0 : records.back().step;
      const std::string kept = !t.checkpoint.empty()
                                   ? fmt::format("the checkpoint {} holds it: run again with --resume, once the "
                                                 "metrics can be written, to go on",
                                                 t.checkpoint)
                               : !t.save.empty() ? fmt::format("{} holds its weights", t.save)
                               : !t.save_best.empty()
                                   ? fmt::format("no --checkpoint or --save; {} keeps the weights of the best "
                                                 "validation so far, if one came",
                                                 t.save_best)
                                   : "nothing was kept (no --checkpoint or --save)";
      if (step >= t.steps)  // the last step's line: the run is done, its record alone is missing
        std::cerr << fmt::format("ktune: {}; the run finished (step {}) without that step's line\n", metrics_failure,
                                 step);
      else
        std::cerr << fmt::format("ktune: {}; the run stopped after step {}; {}\n", metrics_failure, step, kept);
      global.exit_code = 1;
    } else if (const int signal = stop_signals.caught()) {
      const std::string name = StopSignals::name(signal);
      const std::int64_t step = records.empty() ? 0 : records.back().step;
      if (!t.checkpoint.empty())
        std::cerr << fmt::format("stopped by {} after step {}; the checkpoint {} holds it: run again with --resume "
                                 "to go on\n",
                                 name, step, t.checkpoint);
      else
        std::cerr << fmt::format("stopped by {} after step {}; {} holds its weights\n", name, step, t.save);
      global.exit_code = 128 + signal;
    }
  });
}

}  // namespace ktune::cli
