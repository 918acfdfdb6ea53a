// Training and evaluation loops (see train.hpp).
#include "model/train.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <numbers>
#include <numeric>
#include <optional>
#include <span>

#include "base/error.hpp"
#include "model/checkpoint.hpp"
#include "model/data.hpp"
#include "model/memory_plan.hpp"
#include "model/weights.hpp"

namespace ktune::model {

namespace {

// The seed of validation's batch sampler, its own so that validating leaves
// training's batches as they were; eval reads a held-out part with it too.
std::uint64_t validation_seed(std::uint64_t seed) { return seed + 2; }

// The run's corpus (--tokens, else the synthetic stream), whole; or with
// val_split, its training part and the part held out after it.
struct Streams {
  TokenStream train;
  std::optional<TokenStream> held_out;
};
/// A token file's stream, refused unless it holds a window of the run's
/// context and its next token (a shorter one would be repeated to fill it).
TokenStream token_file(const std::string& path, const RunOptions& o) {
  TokenStream s = TokenStream::from_file(path, o.model.vocab);
  KTUNE_REQUIRE(s.size() > o.shape.context, fmt::format("{}: {} tokens hold no window of --ctx {} and its next token",
                                                         path, s.size(), o.shape.context));
  return s;
}

Streams streams_for(const RunOptions& o) {
  KTUNE_REQUIRE(o.val_split >= 0 && o.val_split < 1,
                fmt::format("--val-split {}; give a fraction in [0, 1)", o.val_split));
  TokenStream corpus = o.tokens_file.empty() ? TokenStream::synthetic(o.model.vocab, o.seed + 1)
                                             : token_file(o.tokens_file, o);
  if (o.val_split == 0) return {std::move(corpus), std::nullopt};
  KTUNE_REQUIRE(!o.tokens_file.empty(), "--val-split holds out the end of a --tokens file; give one");
  const Split s = split_tokens(corpus.size(), o.val_split, o.shape.context, o.tokens_file);
  return {corpus.slice(0, s.train), corpus.slice(s.train, corpus.size())};
}

}  // namespace

BackendOptions run_backend(const RunOptions& o) {
  BackendOptions b = o.backend;
  b.threads = o.threads;
  return b;
}

namespace {

// A runtime with its starting weights (--weights, else the CS336
// initialisation for the seed); without `weights`, those its construction
// gave it, for a caller that sets them itself (a resumed run).
// The weights are read first: a file refused (damaged, of another model) costs no runtime.
std::unique_ptr<Runtime> start(const RunOptions& o, Allocation allocation, bool weights = true) {
  std::vector<float> params;
  if (weights) {
    const ParameterLayout layout = parameter_layout(o.model);
    params.resize(static_cast<std::size_t>(layout.total));
    if (o.weights.empty())
      init_parameters<float>(layout, params.data(), o.seed);
    else
      load_parameters<float>(o.model, layout, params, SafetensorsReader(o.weights), o.weights);  // a tensor at a time
  }
  auto rt = make_runtime(o.model, o.shape, allocation, run_backend(o));
  if (o.on_runtime) o.on_runtime(*rt);
  if (weights) rt->set_parameters(params);
  return rt;
}

// The host holds the run on the cpu and emu backends; a GPU's memory is its own.
void require_memory(const RunOptions& o, const MemoryPlan& plan, std::int64_t peak, const std::string& run) {
  if (o.backend.backend != "cuda") require_host_memory(plan, peak, run);
}

}  // namespace

float LrSchedule::at(std::int64_t step, float lr) const {
  const std::int64_t it = step - 1;
  if (it < warmup) return lr * static_cast<float>(static_cast<double>(it) / static_cast<double>(warmup));
  if (!cosine) return lr;
  if (it > cycle) return min_lr;
  const double progress = static_cast<double>(it - warmup) / static_cast<double>(cycle - warmup);
  return static_cast<float>(min_lr + 0.5 * (1.0 + std::cos(std::numbers::pi * progress)) * (lr - min_lr));
}

std::vector<StepRecord> train(const TrainOptions& o, const std::function<void(const StepRecord&)>& on_step,
                              const std::function<void(const TrainStart&)>& on_start) {
  check_backend_name(o.backend.backend);
  LrSchedule schedule = o.schedule;
  if (schedule.cosine && schedule.cycle == 0) schedule.cycle = o.steps;
  KTUNE_REQUIRE(schedule.warmup >= 0, fmt::format("warmup of {} steps; give 0 or more", schedule.warmup));
  KTUNE_REQUIRE(!schedule.cosine || schedule.cycle > schedule.warmup,
                fmt::format("a cosine schedule over {} steps with {} of warmup; the cosine needs more steps than the "
                            "warmup",
                            schedule.cycle, schedule.warmup));
  KTUNE_REQUIRE(o.eval_batches >= 1, fmt::format("{} validation batches; give 1 or more", o.eval_batches));
  KTUNE_REQUIRE(!schedule.cosine || schedule.min_lr <= o.hyper.lr,
                fmt::format("minimum learning rate {} above the peak {}", schedule.min_lr, o.hyper.lr));
  KTUNE_REQUIRE(o.save_best.empty() || o.eval_every > 0,
                "--save-best keeps the weights of the lowest validation loss; give --eval-every");
  KTUNE_REQUIRE(o.val_split == 0 || o.val_tokens_file.empty(),
                "--val-split holds out validation tokens of --tokens; --val-tokens gives a file of them: give one");
  // The token files before the model, so a bad one costs no allocation.
  const Streams streams = streams_for(o);
  const TokenStream& stream = streams.train;
  const std::string stream_hash = o.checkpoint.empty() ? "" : stream.fingerprint();  // one pass over the tokens
  const bool resuming = o.resume && !o.checkpoint.empty() && std::filesystem::exists(o.checkpoint);
  std::optional<CheckpointInfo> resumed;
  if (resuming) {  // before anything is allocated: a checkpoint of another model, seed or stream is refused at once
    const CheckpointInfo& info = resumed.emplace(read_checkpoint_info(o.checkpoint, o.model));
    KTUNE_REQUIRE(info.seed == o.seed, fmt::format("{} was trained with seed {}; resume it with --seed {}",
                                                   o.checkpoint, info.seed, info.seed));
    const auto source = [](const std::string& file, std::int64_t count) {
      return file.empty() ? std::string("the synthetic stream") : fmt::format("{} ({} tokens)", file, count);
    };
    KTUNE_REQUIRE(info.tokens_count == 0 ||
                      (info.tokens.empty() == o.tokens_file.empty() && info.tokens_count == stream.size()),
                  fmt::format("{} was trained on {}; this run reads {}{}: resume it on the same tokens", o.checkpoint,
                              source(info.tokens, info.tokens_count), source(o.tokens_file, stream.size()),
                              streams.held_out ? fmt::format(", {} more held out by --val-split {}",
                                                             streams.held_out->size(), o.val_split)
                                               : ""));
    // The ids, in whatever integer width a file stores them.
    KTUNE_REQUIRE(info.tokens_hash.empty() || info.tokens_hash == stream_hash,
                  fmt::format("{} was trained on as many tokens as {} holds{}, but other ones: resume it on the same "
                              "tokens",
                              o.checkpoint, source(o.tokens_file, stream.size()),
                              streams.held_out ? " before --val-split's share" : ""));
    // A checkpoint written before the ids were hashed holds a hash of the bytes that stored them, which the same ids
    // stored at another width (a .npy of int64 for a raw uint16 file) do not match.
    KTUNE_REQUIRE(!info.tokens_hash.empty() || info.tokens_bytes_hash.empty() ||
                      info.tokens_bytes_hash == stream.bytes_fingerprint(),
                  fmt::format("{} was trained on as many tokens as {} holds{}, but other ones, or the same ones "
                              "stored otherwise (it records the bytes that stored them, not the ids): resume it on "
                              "the file it was trained on",
                              o.checkpoint, source(o.tokens_file, stream.size()),
                              streams.held_out ? " before --val-split's share" : ""));
  }
  const std::optional<TokenStream> val_file =
      o.eval_every > 0 && !o.val_tokens_file.empty()
          ? std::optional<TokenStream>(token_file(o.val_tokens_file, o))
          : std::nullopt;
  const TokenStream& val_stream = val_file ? *val_file : streams.held_out ? *streams.held_out : stream;
  const MemoryPlan plan = plan_run(o.model, o.shape, run_backend(o));
  require_memory(o, plan, plan.peak_step(), "training");
  // A checkpoint is read and checked (a flipped bit refused) before the runtime is made or anything is said.
  std::optional<CheckpointState> checkpoint;
  if (resuming) checkpoint = read_checkpoint(o.checkpoint, o.model, parameter_layout(o.model));
  auto model = start(o, Allocation::kTrain, !resuming);
  if (on_start) on_start({*model, stream.size(), streams.held_out ? streams.held_out->size() : 0, resumed});
  const auto save_weights = [&](const std::string& path) {
    TensorFile file = parameters_file<float>(o.model, model->layout(), model->parameters());
    file.metadata["context"] = std::to_string(o.shape.context);  // what `generate` and `eval` default --ctx to
    // As a checkpoint states them: `eval` of weights trained on the synthetic stream (no tokens) reads that stream.
    file.metadata["seed"] = std::to_string(o.seed);
    file.metadata["tokens"] = o.tokens_file;
    write_safetensors(path, file);
  };
  const auto validate = [&] {
    std::mt19937_64 rng(validation_seed(o.seed));
    std::vector<std::int32_t> val_tokens, val_targets;
    double sum = 0;
    for (std::int64_t b = 0; b < o.eval_batches; ++b) {
      val_stream.sample(o.shape, rng, val_tokens, val_targets);
      sum += model->forward(val_tokens, val_targets);
    }
    return sum / static_cast<double>(o.eval_batches);
  };
  CheckpointInfo at{0, o.seed, std::mt19937_64(o.seed), o.tokens_file, stream.size(), o.shape, std::nullopt,
                    stream_hash, {}, {}};
  if (resuming) {
    at = std::move(*checkpoint).apply(*model);
    checkpoint.reset();
    at.tokens = o.tokens_file;  // where a moved file is read from now
    at.tokens_count = stream.size();
    at.tokens_hash = stream_hash;
    at.shape = o.shape;  // the batches from here on
  }
  at.settings = train_settings(o);  // the steps from here on
  if (const std::string v = validation_setting(o); !v.empty()) at.settings[kValidationSetting] = v;
  std::vector<std::int32_t> tokens, targets;
  std::vector<StepRecord> records;
  std::int64_t last_checkpoint = at.step;  // the step the checkpoint file holds (0: none yet)
  // A step's windows, drawn at once: its micro-batches are the batches of
  // one draw of micro_batches x batch windows, each batch's tokens in turn.
  const RunShape step_shape{o.shape.micro_batches * o.shape.batch, o.shape.context};
  const auto micro = [&](const std::vector<std::int32_t>& all, std::int64_t k) {
    return std::span<const std::int32_t>(all).subspan(static_cast<std::size_t>(k * o.shape.tokens()),
                                                      static_cast<std::size_t>(o.shape.tokens()));
  };
  // Where a diverged run stops, before anything of its step is written: the
  // checkpoint keeps the last good step.
  const auto held = [&] {
    return o.checkpoint.empty() || last_checkpoint == 0
               ? std::string()
               : fmt::format("; {} holds step {}", o.checkpoint, last_checkpoint);
  };
  // A diverged run writes no weights: what still holds it, and that --save does not.
  const auto unsaved = [&] {
    return o.save.empty() ? std::string() : fmt::format("; --save {} is not written", o.save);
  };
  const auto diverged = [&] { return "training diverged" + held() + unsaved(); };
  // Weights files and checkpoints refuse weights that are not finite (a loss
  // can stay finite while an update writes NaN): the run stops there. A
  // write that fails (a full disk) says what still holds the run.
  const auto unless_diverged = [&](std::int64_t step, const std::function<void()>& write) {
    try {
      write();
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::kIo)
        throw_error(ErrorKind::kIo, fmt::format("{}: the run stopped after step {}{}", e.what(), step, held()));
      if (e.kind() != ErrorKind::kCheckFailed) throw;
      throw_error(ErrorKind::kCheckFailed, fmt::format("{} at step {}{}{}", e.what(), step, held(), unsaved()));
    }
  };
  for (std::int64_t s = at.step + 1; s <= o.steps; ++s) {
    try {
      stream.sample(step_shape, at.sampler, tokens, targets);
    } catch (const Error& e) {  // the token file cut while it is read: what still holds the run
      if (e.kind() != ErrorKind::kIo) throw;
      throw_error(ErrorKind::kIo, fmt::format("{}; the run stopped before step {}{}", e.what(), s, held()));
    }
    const auto t0 = std::chrono::steady_clock::now();
    const auto before = model->launches();
    StepRecord r;
    r.step = s;
    r.tokens = o.shape.step_tokens();
    templates::adamw::AdamwHyper hyper = o.hyper;
    hyper.lr = schedule.at(s, o.hyper.lr);
    r.lr = hyper.lr;
    for (std::int64_t k = 0; k < o.shape.micro_batches; ++k) {
      const double loss = model->forward(micro(tokens, k), micro(targets, k));
      if (!std::isfinite(loss))  // before the update: the weights, and any checkpoint, stay the last good step's
        throw_error(ErrorKind::kCheckFailed,
                    fmt::format("the loss is {} at step {}: {}", value_text(loss), s, diverged()));
      r.loss += loss / static_cast<double>(o.shape.micro_batches);
      model->backward(k > 0);
    }
    model->step(hyper);
    model->synchronize();
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.grad_norm = model->grad_norm();
    if (r.grad_norm && !std::isfinite(*r.grad_norm))  // the update wrote it into the weights
      throw_error(ErrorKind::kCheckFailed,
                  fmt::format("the gradient norm is {} at step {}: {}", value_text(*r.grad_norm), s, diverged()));
    if (before) r.launches = model->launches()->since(*before);
    at.step = s;
    if (o.eval_every > 0 && (s % o.eval_every == 0 || s == o.steps)) {
      r.val_loss = validate();
      if (!o.save_best.empty() && (!at.best_val_loss || *r.val_loss < *at.best_val_loss)) {
        unless_diverged(s, [&] { save_weights(o.save_best); });
        at.best_val_loss = r.val_loss;
        r.saved_best = true;
      }
    }
    bool stop = s == o.steps || (o.should_stop && o.should_stop());
    r.checkpointed = !o.checkpoint.empty() && (stop || (o.checkpoint_every > 0 && s % o.checkpoint_every == 0));
    records.push_back(r);
    // The step's record goes out before its checkpoint: a run killed between
    // the two resumes from the checkpoint before, whose run drops the records
    // past it; the other way round, a checkpointed step would have none.
    if (on_step) on_step(r);
    // A stop asked while the record went out (its --metrics line could not
    // be written, or a signal came) ends the run at this step, written.
    if (!stop && o.should_stop && o.should_stop()) {
      stop = true;
      r.checkpointed = records.back().checkpointed = !o.checkpoint.empty();
    }
    if (r.checkpointed) {
      try {
        unless_diverged(s, [&] { write_checkpoint(o.checkpoint, *model, at); });
      } catch (const Error& e) {
        // A checkpoint that cannot be written (a full disk) leaves --save, which may still fit, to keep the step.
        if (e.kind() != ErrorKind::kIo || o.save.empty()) throw;
        std::string saved;
        try {
          save_weights(o.save);
          saved = fmt::format("{} holds the weights of step {}", o.save, s);
        } catch (const Error& also) {
          saved = fmt::format("--save {} could not be written either: {}", o.save, also.what());
        }
        throw_error(ErrorKind::kIo, fmt::format("{}; {}", e.what(), saved));
      }
      last_checkpoint = s;
    }
    if (stop) break;
  }
  if (!o.save.empty()) unless_diverged(at.step, [&] { save_weights(o.save); });
  if (o.on_finish) o.on_finish(*model);
  return records;
}

std::map<std::string, std::string> train_settings(const TrainOptions& o) {
  const auto number = [](double v) { return fmt::format("{:g}", v); };
  std::map<std::string, std::string> s = {
      {"--lr", number(o.hyper.lr)},           {"--weight-decay", number(o.hyper.weight_decay)},
      {"--beta1", number(o.hyper.beta1)},     {"--beta2", number(o.hyper.beta2)},
      {"--eps", number(o.hyper.eps)},         {"--clip-norm", number(o.hyper.max_grad_norm)},
      {"--warmup-steps", std::to_string(o.schedule.warmup)},
      {"--lr-schedule", o.schedule.cosine ? "cosine" : "constant"}};
  // Where the steps run and in what precision: another backend, mode or dtype computes other bits (the cpu
  // backend runs its one path in f32). A device backend's sums run in a fixed order with --deterministic only
  // (BackendOptions::deterministic); the cpu backend's always do, at any thread count.
  s["--backend"] = o.backend.backend;
  if (o.backend.backend != "cpu") {
    s["--mode"] = to_string(o.backend.mode);
    s["--dtype"] = to_string(o.backend.precision);
    s["--deterministic"] = o.backend.deterministic ? "on" : "off";
  }
  if (o.schedule.cosine) {
    s["--min-lr"] = number(o.schedule.min_lr);
    // The iteration the cosine ends at: --cosine-steps, else the run's --steps.
    s["--cosine-steps"] = std::to_string(o.schedule.cycle > 0 ? o.schedule.cycle : o.steps);
  }
  return s;
}

std::string validation_setting(const TrainOptions& o) {
  if (o.eval_every == 0) return "";
  const std::string source = !o.val_tokens_file.empty() ? o.val_tokens_file
                             : o.val_split > 0          ? fmt::format("the last {:g} of {}", o.val_split, o.tokens_file)
                                                        : std::string("the training stream");
  return fmt::format("{} batches of {} x {} windows of {}", o.eval_batches, o.shape.batch, o.shape.context, source);
}

EvalResult evaluate(const RunOptions& o, bool gradients, std::int64_t batches) {
  check_backend_name(o.backend.backend);
  KTUNE_REQUIRE(batches >= 1, fmt::format("{} batches to evaluate; give 1 or more", batches));
  KTUNE_REQUIRE(!gradients || batches == 1, "gradients are of one batch; evaluate more batches without them");
  const MemoryPlan plan = plan_run(o.model, o.shape, run_backend(o));
  const Allocation allocation = gradients ? Allocation::kGradients : Allocation::kForwardOnly;
  require_memory(o, plan, plan.peak(allocation), "evaluating");
  const Streams streams = streams_for(o);
  const TokenStream& stream = streams.held_out ? *streams.held_out : streams.train;
  auto model = start(o, allocation);
  // A held-out part is read as training's validation reads it; else training's first batches.
  std::mt19937_64 rng(streams.held_out ? validation_seed(o.seed) : o.seed);
  std::vector<std::int32_t> tokens, targets;
  EvalResult r;
  const auto before = model->launches();
  for (std::int64_t b = 0; b < batches; ++b) {
    stream.sample(o.shape, rng, tokens, targets);
    r.loss += model->forward(tokens, targets) / static_cast<double>(batches);
  }
  if (gradients) model->backward();
  if (before) r.launches = model->launches()->since(*before);
  if (gradients) {
    const auto grads = model->gradients();
    double total = 0;
    for (const auto& info : model->layout().tensors) {
      double sq = 0;
      for (std::int64_t i = 0; i < info.numel; ++i) {
        const double g = grads[info.offset + i];
        sq += g * g;
      }
      r.grad_norms.emplace_back(info.name, std::sqrt(sq));
      total += sq;
    }
    r.grad_norm_total = std::sqrt(total);
  }
  if (o.on_finish) o.on_finish(*model);
  return r;
}

FullEvalResult evaluate_all(const RunOptions& o) {
  check_backend_name(o.backend.backend);
  KTUNE_REQUIRE(!o.tokens_file.empty(),
                "a whole-stream evaluation reads a --tokens file (the synthetic stream never ends)");
  const Streams streams = streams_for(o);
  const TokenStream& stream = streams.held_out ? *streams.held_out : streams.train;
  const std::int64_t C = o.shape.context;
  FullEvalResult r;
  r.windows = (stream.size() - 1) / C;
  KTUNE_REQUIRE(r.windows >= 1,
                fmt::format("{} tokens hold no window of --ctx {} and its next token", stream.size(), C));
  r.tokens = r.windows * C;
  r.unscored = static_cast<std::int64_t>(stream.size()) - 1 - r.tokens;
  // No more windows a forward than there are: a larger --batch would fill its forwards up with copies.
  RunOptions run = o;
  run.shape.batch = std::min(o.shape.batch, r.windows);
  const std::int64_t B = run.shape.batch;
  r.batch = B;
  const MemoryPlan plan = plan_run(run.model, run.shape, run_backend(run));
  require_memory(run, plan, plan.peak_forward(), "evaluating");
  auto model = start(run, Allocation::kForwardOnly);
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(B * C)), targets(tokens.size()), window, next;
  double sum = 0;
  for (std::int64_t first = 0; first < r.windows; first += B) {
    const std::int64_t count = std::min(B, r.windows - first);
    for (std::int64_t b = 0; b < B; ++b) {
      stream.window((first + (b < count ? b : 0)) * C, C, window, next);
      std::copy(window.begin(), window.end(), tokens.begin() + b * C);
      std::copy(next.begin(), next.end(), targets.begin() + b * C);
    }
    model->forward(tokens, targets);
    const std::vector<float> losses = model->token_losses();
    for (std::int64_t i = 0; i < count * C; ++i) sum += losses[static_cast<std::size_t>(i)];
  }
  r.loss = sum / static_cast<double>(r.tokens);
  if (run.on_finish) run.on_finish(*model);
  return r;
}

namespace {

void require_sampling(double temperature, double top_p) {
  KTUNE_REQUIRE(std::isfinite(temperature) && temperature >= 0,
                fmt::format("temperature {}; give 0 (greedy) or more", temperature));
  KTUNE_REQUIRE(top_p > 0 && top_p <= 1, fmt::format("top-p {}; give a probability in (0, 1]", top_p));
}

}  // namespace

std::int32_t sample_token(std::span<const float> logits, double temperature, double top_p, std::mt19937_64& rng) {
  require_sampling(temperature, top_p);
  KTUNE_REQUIRE(!logits.empty(), "no logits to draw a token from");
  for (const float l : logits)
    if (std::isnan(l)) throw_error(ErrorKind::kCheckFailed, "the model's logits hold NaN");
  const auto best = std::max_element(logits.begin(), logits.end());
  if (temperature == 0) return static_cast<std::int32_t>(best - logits.begin());
  // Probabilities in double, from the largest logit down, so no exponential overflows. Where the
  // largest is infinite (+inf, or every logit -inf), the tokens at it share the whole probability, the
  // softmax's limit, rather than inf - inf making every probability NaN.
  const float top = *best;
  std::vector<double> p(logits.size());
  double total = 0;
  for (std::size_t i = 0; i < p.size(); ++i)
    total += p[i] = std::isinf(top) ? (logits[i] == top ? 1.0 : 0.0) : std::exp((logits[i] - top) / temperature);
  std::vector<std::int32_t> order(p.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) { return p[a] > p[b]; });
  // The nucleus: the likeliest tokens until their mass reaches top_p (at least one).
  std::size_t kept = 0;
  double mass = 0;
  // Tokens whose probability underflowed to 0 are never in it.
  while (kept < order.size() && p[order[kept]] > 0 && (kept == 0 || mass < top_p * total)) mass += p[order[kept++]];
  double draw = std::uniform_real_distribution<double>(0, mass)(rng);
  for (std::size_t i = 0; i + 1 < kept; ++i) {
    draw -= p[order[i]];
    if (draw < 0) return order[i];
  }
  return order[kept - 1];
}

std::vector<std::int32_t> generate(const GenerateOptions& o, const std::function<void(std::int32_t)>& on_token) {
  check_backend_name(o.backend.backend);
  KTUNE_REQUIRE(!o.prompt.empty(), "an empty prompt; give at least one token");
  KTUNE_REQUIRE(o.max_tokens >= 1, fmt::format("{} tokens to generate; give 1 or more", o.max_tokens));
  for (const std::int32_t t : o.prompt)
    KTUNE_REQUIRE(t >= 0 && t < o.model.vocab,
                  fmt::format("prompt token {} is outside the vocabulary [0, {})", t, o.model.vocab));
  KTUNE_REQUIRE(!o.eos || (*o.eos >= 0 && *o.eos < o.model.vocab),
                fmt::format("end-of-sequence token {} is outside the vocabulary [0, {})", o.eos.value_or(0),
                            o.model.vocab));
  require_sampling(o.temperature, o.top_p);  // before the model is built
  RunOptions r = o;
  // A window no longer than the longest sequence a forward reads (the last
  // token drawn is not read back): a short generation runs no padding.
  r.shape = RunShape{1, std::min<std::int64_t>(o.shape.context,
                                               static_cast<std::int64_t>(o.prompt.size()) + o.max_tokens - 1)};
  const MemoryPlan plan = plan_run(r.model, r.shape, run_backend(r));
  require_memory(r, plan, plan.peak_forward(), "generating with");
  auto model = start(r, Allocation::kForwardOnly);
  const auto S = static_cast<std::size_t>(r.shape.context);
  std::vector<std::int32_t> sequence = o.prompt, drawn, window(S), targets(S, 0);
  std::mt19937_64 rng(o.seed);
  while (static_cast<std::int64_t>(drawn.size()) < o.max_tokens) {
    // The last S tokens from position 0; a shorter sequence is padded after
    // its end, which causal attention keeps its last token from seeing.
    const std::size_t used = std::min(sequence.size(), S);
    std::fill(window.begin(), window.end(), 0);
    std::copy(sequence.end() - static_cast<std::ptrdiff_t>(used), sequence.end(), window.begin());
    model->forward(window, targets);
    const std::int32_t token =
        sample_token(model->logits(static_cast<std::int64_t>(used) - 1), o.temperature, o.top_p, rng);
    sequence.push_back(token);
    drawn.push_back(token);
    if (on_token) on_token(token);
    if (o.eos && token == *o.eos) break;
  }
  if (r.on_finish) r.on_finish(*model);
  return drawn;
}

}  // namespace ktune::model
