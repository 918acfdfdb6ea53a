// `ktune generate`: continues a prompt of token ids with the Transformer LM
// (CS336's decoding: temperature, top-p, an end-of-sequence token), printing
// each token id as it is drawn.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>

#include "base/json_input.hpp"
#include "base/json_output.hpp"
#include "cli/commands.hpp"
#include "cli/model_args.hpp"
#include "cli/options.hpp"
#include "model/train.hpp"

namespace ktune::cli {

namespace {

// One --prompt argument's ids as comma-separated items: spaces, tabs and
// newlines between ids separate them as commas do ("$(cat ids.txt)", a
// tokenizer's output, quoted), and a comma with spaces beside it ("1, 2") is
// one separator; an empty item ("1,,2") is still refused.
std::string prompt_items(const std::string& word) {
  std::string out;
  bool gap = false;
  for (const char c : word) {
    if (std::isspace(static_cast<unsigned char>(c)) != 0) {
      gap = true;
      continue;
    }
    if (gap && c != ',' && !out.empty() && out.back() != ',') out += ',';
    gap = false;
    out += c;
  }
  return out;
}

}  // namespace

void add_generate_command(CLI::App& app, Global& global) {
  struct Opts {
    ModelArgs m;
    model::GenerateOptions g;
    std::int64_t eos = -1;
    std::vector<std::string> prompt;  // as given: "1 2 3" or "1,2,3"
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("generate",
                                 "Continue a prompt of token ids with the Transformer LM, printing each drawn id");
  add_model_options(cmd, o->m);
  o->m.default_ctx = 256;  // one sequence, no --batch
  o->m.default_batch = 1;
  cmd->add_option("--ctx", o->m.ctx, "Context length: the window of the sequence each token is drawn from")
      ->check(integer_at_least(1))
      ->default_str(std::to_string(o->m.default_ctx));
  add_backend_options(cmd, o->m);
  cmd->add_option("--weights", o->g.weights,
                  "Safetensors weights (a --save or --checkpoint file; default: random init; without --model "
                  "or a size override, the model it holds, and without --ctx, the context it was trained at)")
      ->check(input_file());
  cmd->add_option("--prompt", o->prompt,
                  "Token ids to continue: --prompt 1 2 3, --prompt 1,2,3, or one argument of ids separated by spaces "
                  "or newlines (--prompt \"$(cat ids.txt)\")")
      ->required();
  cmd->add_option("--max-tokens", o->g.max_tokens, "Tokens to draw at most")
      ->check(integer_at_least(1))
      ->capture_default_str();
  cmd->add_option("--temperature", o->g.temperature,
                  "Softmax temperature of the logits; 0 draws the most likely token (greedy)")
      ->check(finite_in(0, std::numeric_limits<double>::infinity(), false, true))
      ->capture_default_str();
  cmd->add_option("--top-p", o->g.top_p,
                  "Nucleus sampling: draw among the fewest likeliest tokens whose probability reaches this")
      ->check(finite_in(0, 1, true, false))
      ->capture_default_str();
  cmd->add_option("--eos", o->eos, "End-of-sequence token id: stop once it is drawn")
      ->check(integer_within(0, std::numeric_limits<std::int32_t>::max(), "in 0..2147483647"))  // then: < vocab
      ->default_str("none");
  cmd->add_option("--seed", o->g.seed, "Seed of the sampler (and of the initialisation without --weights)")
      ->check(integer_at_least(0))
      ->capture_default_str();
  cmd->callback([o, cmd, &global] {
    model::GenerateOptions g = o->g;
    if (o->eos >= 0) g.eos = static_cast<std::int32_t>(o->eos);
    for (const std::string& word : o->prompt)  // an option read as a value: "--prompt --max-tokens 5"
      KTUNE_REQUIRE(word.rfind("--", 0) != 0,
                    fmt::format("--prompt takes token ids, not the option '{}': give at least one id after --prompt",
                                excerpt(word)));
    std::vector<std::string> items;
    for (const std::string& word : o->prompt) items.push_back(prompt_items(word));
    for (const std::int64_t id : int_list_arg(fmt::format("{}", fmt::join(items, ",")), "--prompt", 0)) {
      KTUNE_REQUIRE(id <= std::numeric_limits<std::int32_t>::max(),
                    fmt::format("--prompt: token id {} is past the largest, 2147483647", id));
      g.prompt.push_back(static_cast<std::int32_t>(id));
    }
    // The model (and context) the weights say, where the command line does not: said once the run starts, so
    // that a refusal on the way is its one line.
    std::string notes;
    take_from_weights(cmd, o->m, o->g.weights, notes);
    g.model = model_from_args(o->m);
    g.shape = shape_from_args(o->m);
    g.threads = threads_from_args(o->m);
    g.backend = backend_from_args(o->m, g.threads);
    // Stdout holds the drawn ids: where the kernels' configs came from, and stale or unusable tuned entries, go to
    // stderr.
    std::size_t warned = 0;
    g.on_runtime = [&warned, &notes](const model::Runtime& rt) {
      std::cerr << notes;
      warned = print_warnings(rt);
      if (const std::string kernels = kernels_line(rt); !kernels.empty()) std::cerr << kernels << "\n";
    };
    g.on_finish = [&warned](const model::Runtime& rt) { print_warnings(rt, warned); };  // the GEMMs' choices
    // Wall time from the start: to the first token (the model's start, its
    // kernels compiled or loaded, and a forward), then the rest.
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    const auto since_start = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
    double first_s = 0;
    bool first = true;
    const auto drawn = model::generate(g, [&](std::int32_t token) {
      if (first) first_s = since_start();
      if (!global.json) std::cout << (first ? "" : " ") << token << std::flush;  // each id as it is drawn
      first = false;
    });
    const double total_s = since_start();
    if (global.json) {
      // The run described as eval's JSON describes it: the backend and precision beside the sampling.
      const nlohmann::json j{{"model", g.model.name},
                             {"context_length", g.shape.context},
                             {"backend", g.backend.backend},
                             {"dtype", model::to_string(g.backend.precision)},
                             {"temperature", g.temperature},
                             {"top_p", g.top_p},
                             {"max_tokens", g.max_tokens},
                             {"eos", g.eos ? nlohmann::json(*g.eos) : nlohmann::json()},
                             {"seed", g.seed},
                             {"prompt", g.prompt},
                             {"tokens", drawn},
                             {"seconds", total_s},
                             {"first_token_seconds", first_s}};
      std::cout << dump_json(j, 2) << "\n";
      return;
    }
    std::cout << "\n" << std::flush;
    const std::string first_said =
        fmt::format("{:.2f} s to the first (the model's start and a forward)", first_s);
    if (drawn.size() == 1)
      std::cerr << fmt::format("1 token in {:.2f} s: {}\n", total_s, first_said);
    else
      std::cerr << fmt::format("{} tokens in {:.2f} s: {}, then {:.1f} tokens/s\n", drawn.size(), total_s, first_said,
                               static_cast<double>(drawn.size() - 1) / std::max(total_s - first_s, 1e-9));
  });
}

}  // namespace ktune::cli
