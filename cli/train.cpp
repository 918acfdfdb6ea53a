// `ktune train`: trains the Transformer on a backend (cpu, cuda, emu) and
// prints the loss per step (synthetic learnable tokens unless --tokens is given).
#include <fmt/format.h>

#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>

#include "base/files.hpp"
#include "cli/commands.hpp"
#include "cli/model_args.hpp"
#include "cli/options.hpp"
#include "model/train.hpp"

namespace ktune::cli {

void add_train_command(CLI::App& app, Global& global) {
  struct Opts {
    ModelArgs m;
    model::TrainOptions t;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("train", "Train the Transformer LM, printing the loss per step");
  add_model_options(cmd, o->m);
  add_backend_options(cmd, o->m);
  cmd->add_option("--steps", o->t.steps, "Optimizer steps")->check(integer_at_least(1))->capture_default_str();
  cmd->add_option("--weights", o->t.weights, "Start from these safetensors weights (default: random init)");
  cmd->add_option("--save", o->t.save, "Write the trained weights here (safetensors)");
  cmd->add_option("--tokens", o->t.tokens_file, "Raw uint16 token file (default: a synthetic learnable stream)");
  constexpr double kInf = std::numeric_limits<double>::infinity();
  cmd->add_option("--lr", o->t.hyper.lr, "AdamW learning rate")->check(finite_in(0, kInf, false, true))
      ->capture_default_str();
  cmd->add_option("--beta1", o->t.hyper.beta1, "AdamW beta1")->check(finite_in(0, 1, false, true))
      ->capture_default_str();
  cmd->add_option("--beta2", o->t.hyper.beta2, "AdamW beta2")->check(finite_in(0, 1, false, true))
      ->capture_default_str();
  cmd->add_option("--eps", o->t.hyper.eps, "AdamW epsilon")->check(finite_in(0, kInf, true, true))
      ->capture_default_str();
  cmd->add_option("--weight-decay", o->t.hyper.weight_decay, "AdamW decoupled weight decay")
      ->check(finite_in(0, kInf, false, true))
      ->capture_default_str();
  cmd->add_option("--clip-norm", o->t.hyper.max_grad_norm,
                  "Clip the gradients by their global L2 norm to at most this before each AdamW step; 0: no "
                  "clipping")
      ->check(finite_in(0, kInf, false, true))
      ->capture_default_str();
  cmd->add_option("--seed", o->t.seed, "Seed of the initialisation and the batch sampler")->capture_default_str();
  cmd->add_flag("--json", global.json, "Machine-readable JSON on stdout");
  cmd->callback([o, &global] {
    if (!o->t.save.empty()) writable_target(o->t.save, "--save");  // before the training, not after
    model::TrainOptions t = o->t;
    t.model = model_from_args(o->m);
    t.shape = shape_from_args(o->m, 32, 4);
    t.threads = threads_from_args(o->m);
    t.backend = backend_from_args(o->m, t.threads);
    const auto records = model::train(
        t,
        [&global](const model::StepRecord& r) {
          if (!global.json)
            std::cout << fmt::format("step {:>5}  loss {:.4f}  ({:.1f} ms)\n", r.step, r.loss, r.seconds * 1e3)
                      << std::flush;
        },
        [&global, &t](const model::Runtime& rt) {  // once the backend is up: a missing GPU says only that
          if (global.json) return;
          std::cout << fmt::format("training {} (d_model {}, {} layers, {} heads, vocab {}) on {}, ctx {}, batch {}{}\n",
                                   t.model.name, t.model.d_model, t.model.layers, t.model.heads, t.model.vocab,
                                   t.backend.backend, t.shape.context, t.shape.batch,
                                   t.backend.backend == "cpu" ? fmt::format(", {} threads", t.threads) : "");
          for (const auto& w : rt.warnings()) std::cerr << "warning: " << w << "\n";
          if (!rt.kernel_summary().empty()) std::cout << rt.device() << ": " << rt.kernel_summary() << "\n";
        });
    if (global.json) {
      nlohmann::json j = nlohmann::json::array();
      for (const auto& r : records) {
        j.push_back({{"step", r.step}, {"loss", r.loss}, {"seconds", r.seconds}});
        if (r.launches) j.back()["launches"] = {{"kernels", r.launches->kernels}, {"gemms", r.launches->gemms}};
      }
      std::cout << nlohmann::json{{"model", t.model.name}, {"steps", j}}.dump(2) << "\n";
    } else if (!records.empty()) {
      std::cout << fmt::format("loss {:.4f} -> {:.4f} over {} steps\n", records.front().loss, records.back().loss,
                               records.size());
      if (records.back().launches)
        std::cout << fmt::format("launches/step: {} ({} mode)\n", records.back().launches->str(),
                                 model::to_string(t.backend.mode));
    }
    if (!t.save.empty() && !global.json) std::cout << "saved weights to " << t.save << "\n";
  });
}

}  // namespace ktune::cli
