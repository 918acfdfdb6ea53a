// `ktune eval`: the loss of given weights on one batch of tokens (or the
// mean of several, or with --all over a whole token file), and with --dump
// the per-parameter gradient norms as JSON.
#include <fmt/format.h>

#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "base/files.hpp"
#include "base/json_output.hpp"
#include "cli/commands.hpp"
#include "cli/model_args.hpp"
#include "cli/options.hpp"
#include "model/train.hpp"
#include "model/weights.hpp"

namespace ktune::cli {

void add_eval_command(CLI::App& app, Global& global) {
  struct Opts {
    ModelArgs m;
    model::RunOptions r;
    std::string dump;
    std::int64_t batches = 1;
    bool all = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand(
      "eval", "Loss of the Transformer LM on one batch, the mean of several, or over a whole token file");
  add_model_options(cmd, o->m, {.ctx = 32, .batch = 4});
  add_backend_options(cmd, o->m);
  add_deterministic_option(cmd, o->m);  // --dump's gradients sum in the backward
  cmd->add_option("--weights", o->r.weights,
                  "Safetensors weights (default: random init; without --model or a size override, the model it "
                  "holds, and without --ctx, the context it was trained at)")
      ->check(input_file());
  auto* tokens = cmd->add_option("--tokens", o->r.tokens_file,
                                 "Token file: raw uint16, or a .npy integer array (default: the synthetic stream)")
                    ->check(input_file());
  cmd->add_option("--val-split", o->r.val_split,
                  "Evaluate the last fraction of --tokens, the part `train --val-split` holds out")
      ->check(finite_in(0, 1, true, true))
      ->default_str("none")
      ->needs(tokens);
  cmd->add_option("--seed", o->r.seed,
                  "Seed of the initialisation, the batch sampler and, without --tokens, the synthetic token stream "
                  "(default: the seed --weights were trained at, with --tokens or for weights trained on that stream)")
      ->check(integer_at_least(0))
      ->capture_default_str();
  auto* batches = cmd->add_option("--batches", o->batches,
                                  "Batches to average the loss over: the first N the sampler draws for --seed (with "
                                  "--val-split, those `train --eval-every` validates on)")
                      ->check(integer_at_least(1))
                      ->capture_default_str();
  auto* dump = cmd->add_option("--dump", o->dump,
                               "Write the loss and per-parameter gradient norms (of one batch) to this JSON file")
                   ->check(output_file())
                   ->excludes(batches);
  cmd->add_flag("--all", o->all,
                "The loss over the whole of --tokens (or the part --val-split holds out): every window of --ctx "
                "tokens back to back from its start, each token once, --batch windows a forward")
      ->needs(tokens)
      ->excludes(batches)
      ->excludes(dump);
  cmd->callback([o, cmd, &global] {
    require_distinct_files({{"--weights", o->r.weights}, {"--tokens", o->r.tokens_file}, {"--cache", o->m.cache}},
                           {{"--dump", o->dump}});
    if (!o->dump.empty()) writable_target(o->dump, "--dump");  // before the work, not after
    model::RunOptions r = o->r;
    // The model (and context) the weights say, where the command line does not: said once the run starts, so
    // that a refusal on the way is its one line.
    std::string notes;
    take_from_weights(cmd, o->m, o->r.weights, notes);
    // The seed the weights were trained at: a token file's batches as their run drew them (with --val-split, those
    // its validation read), or the synthetic stream they learned where this run reads it too.
    // (--all draws nothing.)
    if (cmd->get_option("--seed")->count() == 0 && !o->all)
      if (const auto seed = recorded_seed(o->r.weights, !r.tokens_file.empty()); seed && *seed != r.seed) {
        r.seed = *seed;
        notes += fmt::format("note: --seed {} from the metadata of {} ({})\n", *seed, o->r.weights,
                             r.tokens_file.empty() ? "the synthetic stream it was trained on"
                             : r.val_split > 0     ? "the seed of its run, whose validation read these batches"
                                                   : "the seed of its run, which drew these batches first");
      }
    r.model = model_from_args(o->m);
    r.shape = shape_from_args(o->m);
    r.threads = threads_from_args(o->m);
    r.backend = backend_from_args(o->m, r.threads);
    // Where the kernels' configs came from (a device backend's) goes with the loss, said once the run has
    // chosen its GEMMs; stale or unusable tuned entries are warned of at once, the GEMMs' as the run ends.
    std::string kernels;
    std::size_t warned = 0;
    r.on_runtime = [&warned, &notes](const model::Runtime& rt) {
      std::cerr << notes;
      warned = print_warnings(rt);
    };
    r.on_finish = [&kernels, &warned](const model::Runtime& rt) {
      print_warnings(rt, warned);
      kernels = kernels_line(rt);
    };
    // Weights whose loss is not finite (logits that overflow) fail, as a diverged training run does.
    const auto require_finite = [&](double loss, const std::string& over) {
      if (!std::isfinite(loss))
        throw_error(ErrorKind::kCheckFailed,
                    fmt::format("the loss is {} over {}: the weights {} give no finite loss{}", model::value_text(loss),
                                over, r.weights.empty() ? "of the random initialisation" : "in " + r.weights,
                                o->dump.empty() ? "" : fmt::format("; --dump {} is not written", o->dump)));
    };
    if (o->all) {
      const model::FullEvalResult full = model::evaluate_all(r);
      require_finite(full.loss, fmt::format("all of {}", r.tokens_file));
      nlohmann::ordered_json j{{"model", r.model.name},
                               {"context_length", r.shape.context},
                               {"batch_size", full.batch},
                               {"backend", r.backend.backend},
                               {"dtype", model::to_string(r.backend.precision)},
                               {"tokens_file", r.tokens_file},
                               {"val_split", r.val_split > 0 ? nlohmann::ordered_json(r.val_split)
                                                             : nlohmann::ordered_json()},
                               {"windows", full.windows},
                               {"tokens", full.tokens},
                               {"unscored_tokens", full.unscored},
                               {"loss", full.loss},
                               {"perplexity", std::exp(full.loss)}};
      if (!kernels.empty()) j["kernels"] = kernels;
      if (global.json)
        std::cout << dump_json(j, 2) << "\n";
      else
        std::cout << fmt::format("loss {:.6f} (perplexity {:.4g}) over all of {}{}: {} window{} of {} tokens{}\n",
                                 full.loss, std::exp(full.loss), r.tokens_file,
                                 r.val_split > 0 ? " held out by --val-split" : "", full.windows,
                                 full.windows == 1 ? "" : "s", r.shape.context,
                                 full.unscored == 0 ? ""
                                                    : fmt::format(" (the last {} token{}, short of a window, not "
                                                                  "scored)",
                                                                  full.unscored, full.unscored == 1 ? "" : "s"))
                  << (kernels.empty() ? "" : kernels + "\n");
      return;
    }
    const auto result = model::evaluate(r, !o->dump.empty(), o->batches);
    require_finite(result.loss, fmt::format("{}{} x {} tokens",
                                            o->batches > 1 ? fmt::format("{} batches of ", o->batches) : "",
                                            r.shape.batch, r.shape.context));
    nlohmann::ordered_json j = {{"model", r.model.name}, {"context_length", r.shape.context},
                        {"batch_size", r.shape.batch}, {"backend", r.backend.backend},
                        {"dtype", model::to_string(r.backend.precision)},
                        {"tokens_file",  // null: the synthetic stream
                         r.tokens_file.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(r.tokens_file)},
                        {"val_split", r.val_split > 0 ? nlohmann::ordered_json(r.val_split) : nlohmann::ordered_json()},
                        {"batches", o->batches}, {"seed", r.seed}, {"loss", result.loss},
                        {"perplexity", std::exp(result.loss)}};
    if (result.launches)
      j["launches"] = {{"kernels", result.launches->kernels}, {"gemms", result.launches->gemms}};
    if (!o->dump.empty()) {
      nlohmann::ordered_json norms;
      for (const auto& [name, norm] : result.grad_norms) norms[name] = norm;
      j["grad_norm_total"] = result.grad_norm_total;
      j["grad_norms"] = norms;
      write_file_atomic(o->dump, dump_json(j, 2) + "\n");
    }
    if (!kernels.empty()) j["kernels"] = kernels;  // on stdout, not in --dump's file
    if (global.json)
      std::cout << dump_json(j, 2) << "\n";
    else
      std::cout << fmt::format("loss {:.6f} (perplexity {:.4g}; {}{} x {} tokens of {})\n", result.loss,
                               std::exp(result.loss),
                               o->batches > 1 ? fmt::format("mean of {} batches of ", o->batches) : "", r.shape.batch,
                               r.shape.context,
                               r.tokens_file.empty()
                                   ? fmt::format("the synthetic stream of seed {} (no --tokens)", r.seed)
                                   : fmt::format("{}{}, drawn at seed {}", r.tokens_file,
                                                 r.val_split > 0 ? " held out by --val-split" : "", r.seed))
                << (kernels.empty() ? "" : kernels + "\n")
                << (result.launches ? fmt::format("launches: {} ({} mode, {}{})\n", result.launches->str(),
                                                  model::to_string(r.backend.mode),
                                                  o->batches > 1 ? fmt::format("{} forwards", o->batches) : "forward",
                                                  o->dump.empty() ? "" : " + backward")
                                    : "")
                << (o->dump.empty() ? "" : fmt::format("gradient norms written to {}\n", o->dump));
  });
}

}  // namespace ktune::cli
