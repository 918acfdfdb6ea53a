// `ktune bench e2e`: the end-to-end benchmark of seeds 002 and 004, printed
// in their columns (002: mean/std ms per pass; 004: fwd, back, fwd+back
// avg/std in seconds) with the measured and planned memory, stamped with
// device, driver, date and git revision, or as JSON.
#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <limits>
#include <set>
#include <utility>

#include "base/error.hpp"
#include "base/files.hpp"
#include "base/stamp.hpp"
#include "cli/bench_stop.hpp"
#include "cli/commands.hpp"
#include "cli/model_args.hpp"
#include "cli/options.hpp"
#include "cli/progress.hpp"
#include "model/bench_e2e.hpp"
#include "model/runtime.hpp"
#include "search/winner.hpp"

namespace ktune::cli {

namespace {

// Each op's median time a step over the profiled steps, the slowest first,
// and what the ops add up to beside the timed step's median.
std::string profile_markdown(const model::E2eResult& r) {
  struct Row {
    const model::OpTimes* op;
    double device_ms, host_ms;
  };
  std::vector<Row> rows;
  double total = 0;
  for (const auto& t : r.profile) {
    rows.push_back({&t, model::phase_stats(t.device_ms).median_ms, model::phase_stats(t.host_ms).median_ms});
    total += rows.back().device_ms;
  }
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.device_ms > b.device_ms; });
  std::string s = fmt::format(
      "\nper op over {} profiled steps after the trials, medians (ms a step): device between two marks ({}) around "
      "each op's calls, host inside them (enqueuing, and where an op reads a result back, as the loss's mean does, "
      "its wait for the device); TFLOP/s of GEMMs (2 m n k) and attention (the causal half of "
      "4 B H S^2 d forward, 2.5 times that backward, whatever the kernels compute)\n\n",
      r.profile_steps, r.clock);
  s += "| phase | op | shape | calls | device ms | host ms | % of the ops | TFLOP/s |\n"
       "|:--|:--|:--|--:|--:|--:|--:|--:|\n";
  for (const auto& row : rows) {
    // The host emulation's times say nothing of a GPU's rates.
    const bool rate = row.op->flops > 0 && row.device_ms > 0 && r.options.backend.backend != "emu";
    s += fmt::format("| {} | {} | {} | {} | {:.4f} | {:.4f} | {:.1f} | {} |\n", row.op->phase, row.op->op,
                     row.op->shape, row.op->calls, row.device_ms, row.host_ms,
                     total > 0 ? 100 * row.device_ms / total : 0.0,
                     rate ? fmt::format("{:.3g}", row.op->flops / (row.device_ms * 1e9)) : std::string("-"));
  }
  const auto& timed = r.step.measured ? r.step : r.backward.measured ? r.forward_backward : r.forward;
  s += fmt::format("\nthe ops add up to {:.3f} ms a step; the timed trials' median: {:.3f} ms\n", total,
                   timed.median_ms);
  s += "\nper phase, the ops' medians (ms a step) by kind: GEMMs, attention, and the rest (norms, RoPE, SwiGLU, "
       "loss, embedding, AdamW)\n\n| phase | ms | GEMMs | attention | the rest |\n|:--|--:|--:|--:|--:|\n";
  for (const auto& k : model::phase_kinds(r.profile)) {
    const auto part = [&](double ms) {
      return fmt::format("{:.3f} ({:.1f} %)", ms, k.total_ms() > 0 ? 100 * ms / k.total_ms() : 0.0);
    };
    s += fmt::format("| {} | {:.3f} | {} | {} | {} |\n", k.phase, k.total_ms(), part(k.gemm_ms),
                     part(k.attention_ms), part(k.rest_ms));
  }
  return s;
}

// The title, stamp, kernels and launches of a run (the first of a sweep).
std::string heading(const model::E2eResult& r) {
  const auto& o = r.options;
  const auto& b = o.backend;
  std::string s = fmt::format("# End-to-end benchmark ({} backend{}, {}, {}, {})\n\n", b.backend,
                              b.backend == "cpu" ? "" : fmt::format(", {} mode", model::to_string(b.mode)), r.device,
                              model::to_string(b.precision), r.date);
  s += fmt::format("{}git revision {}, ktune {}; phases timed with {}\n\n",
                   r.driver.empty() ? ""
                                    : fmt::format("NVIDIA driver {}, CUDA driver API {}, ",
                                                  r.nvidia_driver.empty() ? "unknown" : r.nvidia_driver, r.driver),
                   git_revision(), ktune_version(), r.clock);
  if (o.shape.recompute == model::Recompute::kBlocks)
    s += "activations recomputed: each block's forward runs again before its backward (--recompute)\n\n";
  if (o.shape.recompute == model::Recompute::kSwiglu)
    s += "activations recomputed: each block's SwiGLU runs again before its backward (--recompute swiglu)\n\n";
  if (!r.kernels.empty()) s += r.kernels + "\n\n";
  if (r.launches)
    s += fmt::format("launches/step: {} ({} mode, counted)\n\n", r.launches->str(), model::to_string(b.mode));
  return s;
}

// Seed 002's table: its header, then a row per run.
std::string seed002_header() {
  return "| model_size | d_model | context_length | num_layers | num_heads | batch_size | num_warmups | num_trials | "
         "forward_only | mean_time_ms | std_time_ms |\n"
         "|:--|--:|--:|--:|--:|--:|--:|--:|:--|--:|--:|\n";
}
// The phase a seed 002 row times: the forward, or forward + backward.
const model::PhaseStats& seed002_timed(const model::E2eResult& r) {
  return r.options.passes == model::E2ePasses::kForward ? r.forward : r.forward_backward;
}
std::string seed002_row(const model::E2eResult& r) {
  const auto& o = r.options;
  const auto& m = o.model;
  const bool fwd_only = o.passes == model::E2ePasses::kForward;
  const auto& main = seed002_timed(r);
  // One trial has no spread to show: "-", not 0.
  return fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.2f} | {} |\n", m.name, m.d_model,
                     o.shape.context, m.layers, m.heads, o.shape.batch, o.warmup, o.trials,
                     fwd_only ? "True" : "False", main.mean_ms,
                     o.trials > 1 ? fmt::format("{:.2f}", main.std_ms) : std::string("-"));
}

/// The line of a run a stop signal ended before its last trial (or profiled step), else "".
std::string incomplete_line(const model::E2eResult& r, const std::string& stopped_by) {
  if (r.complete()) return "";
  if (r.options.trials < r.trials_planned)
    return fmt::format("**Incomplete:** stopped by {} after {} of {} trials; the statistics below are of those.\n\n",
                       stopped_by, r.options.trials, r.trials_planned);
  return fmt::format("**Incomplete:** stopped by {} after {} of {} profiled steps; the profile is of those.\n\n",
                     stopped_by, r.profile_steps, r.trials_planned);
}

std::string markdown(const model::E2eResult& r, const std::string& stopped_by = "") {
  const auto& o = r.options;
  const auto& m = o.model;
  std::string s = heading(r) + incomplete_line(r, stopped_by) + seed002_header() + seed002_row(r) + "\n";
  // Seed 004's layout (seconds), with the optimizer and full step when measured.
  auto sec = [&o](const model::PhaseStats& p, bool mean) {
    return p.measured && (mean || o.trials > 1) ? fmt::format("{:.6f}", (mean ? p.mean_ms : p.std_ms) / 1e3)
                                                : std::string("-");
  };
  const bool optim = r.optimizer.measured;
  s += "| device | batch_size | model | context_length | fwd avg (sec) | fwd std (sec) | back avg (sec) | "
       "back std (sec) | fws & back avg (sec) | fws & back std (sec) |";
  s += optim ? " optimizer avg (sec) | optimizer std (sec) | step avg (sec) | step std (sec) |" : "";
  s += " status |\n|:--|--:|:--|--:|--:|--:|--:|--:|--:|--:|";
  s += optim ? "--:|--:|--:|--:|" : "";
  s += ":--|\n";
  s += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |", o.backend.backend, o.shape.batch, m.name,
                   o.shape.context, sec(r.forward, true), sec(r.forward, false), sec(r.backward, true),
                   sec(r.backward, false), sec(r.forward_backward, true), sec(r.forward_backward, false));
  if (optim)
    s += fmt::format(" {} | {} | {} | {} |", sec(r.optimizer, true), sec(r.optimizer, false), sec(r.step, true),
                     sec(r.step, false));
  s += " ok |\n\n";
  // The medians, which one slow trial does not move as it moves a mean.
  std::string medians;
  for (const auto& [name, p] : {std::pair<const char*, const model::PhaseStats&>{"forward", r.forward},
                                {"backward", r.backward}, {"optimizer", r.optimizer}, {"step", r.step}})
    if (p.measured) medians += fmt::format("{}{} {:.3f}", medians.empty() ? "" : ", ", name, p.median_ms);
  s += "medians of the trials (ms): " + medians + "\n";
  // The model's FLOP rate over forward and backward (and the update, where timed), PaLM's count: an MFU's numerator
  // (none of the host emulation's times, which say nothing of a GPU's rates).
  const model::PhaseStats& whole = optim ? r.step : r.forward_backward;
  if (whole.measured && r.options.backend.backend != "emu")
    s += fmt::format("model TFLOP/s at the {} median (PaLM's count, {:.3g} GFLOP a step): {:.3g}\n",
                     optim ? "step" : "forward + backward", model::train_flops(r) / 1e9,
                     model::train_flops(r) / (whole.median_ms * 1e-3) / 1e12);
  s += "\n";
  // Memory: the plan's peak for the passes run, what the run allocated, and
  // on a GPU the most device memory in use after a step.
  s += "| plan peak | allocated | most in use after a step (device) |\n|--:|--:|--:|\n";
  s += fmt::format("| {} | {} | {} |\n", model::format_bytes(r.plan_peak_bytes), model::format_bytes(r.allocated_bytes),
                   r.device_peak_bytes ? model::format_bytes(*r.device_peak_bytes) : std::string("-"));
  s += fmt::format("\nloss of the first step: {:.6f}\n", r.loss);
  if (o.profile) s += profile_markdown(r);
  return s;
}

// Seed 002's "Mean Time by Warmup Count": per model (`per_model` consecutive
// results each), the mean of its rows' mean_time_ms at each warm-up count.
std::string warmup_table(const std::vector<model::E2eResult>& results, std::size_t per_model,
                         const std::vector<std::int64_t>& warmups) {
  std::string s = "| model_size |", rule = "|:--|";
  for (const auto w : warmups) {
    s += fmt::format(" {} |", w);
    rule += "--:|";
  }
  s += "\n" + rule + "\n";
  for (std::size_t first = 0; first < results.size(); first += per_model) {
    s += fmt::format("| {} |", results[first].options.model.name);
    const std::size_t end = std::min(first + per_model, results.size());  // fewer rows in a sweep cut short
    for (const auto w : warmups) {
      double sum = 0;
      int n = 0;
      for (std::size_t i = first; i < end; ++i)
        if (results[i].options.warmup == w) {
          sum += seed002_timed(results[i]).mean_ms;
          ++n;
        }
      s += n > 0 ? fmt::format(" {:.2f} |", sum / n) : std::string(" - |");
    }
    s += "\n";
  }
  return s;
}

// Seed 002's "Summary Statistics" (pandas' describe()): count, mean, sample
// std, min, quartiles (linear interpolation) and max of the rows'
// mean_time_ms and std_time_ms.
std::string summary_table(const std::vector<model::E2eResult>& results) {
  std::vector<double> means, stds;
  for (const auto& r : results) {
    means.push_back(seed002_timed(r).mean_ms);
    stds.push_back(seed002_timed(r).std_ms);
  }
  std::sort(means.begin(), means.end());
  std::sort(stds.begin(), stds.end());
  const auto m = model::phase_stats(means), d = model::phase_stats(stds);
  std::string s = "|       | mean_time_ms | std_time_ms |\n|:--|--:|--:|\n";
  s += fmt::format("| count | {} | {} |\n", results.size(), results.size());
  s += fmt::format("| mean | {:.2f} | {:.2f} |\n| std | {:.2f} | {:.2f} |\n", m.mean_ms, d.mean_ms, m.std_ms, d.std_ms);
  for (const auto& [name, q] : {std::pair<const char*, double>{"min", 0}, {"25%", 0.25}, {"50%", 0.5},
                                {"75%", 0.75}, {"max", 1}})
    s += fmt::format("| {} | {:.2f} | {:.2f} |\n", name, search::percentile(means, q), search::percentile(stds, q));
  return s;
}

// Seed 002's grid (context x warm-ups x passes, batch 4, 10 trials) for each
// model, a run per row in the seed's order, then its tables: every row, the
// mean time by warm-up count per model, and the summary statistics.
// A stop signal ends the run under way after its step (that run, cut short, is no row) and writes the rows
// finished so far, marked incomplete: each JSON row's "sweep" says so, and a line under the table.
void run_sweep(model::E2eOptions e, const std::vector<model::ModelConfig>& models, const std::string& json_out,
               Global& global) {
  const std::vector<std::int64_t> warmups = {0, 1, 5};
  const std::size_t runs = models.size() * 2 * warmups.size() * 2;
  if (e.backend.backend == "cuda") model::available_memory(e.backend);  // no device: its one line, before any row's
  std::vector<model::E2eResult> results;
  nlohmann::json rows = nlohmann::json::array();
  e.trials = 10;
  const BenchStop stop;
  e.should_stop = stop.check();
  for (const auto& m : models)
    for (const std::int64_t ctx : {128, 256})
      for (const std::int64_t warmup : warmups)
        for (const bool forward_only : {false, true}) {
          if (stop.requested()) break;
          e.model = m;
          e.shape.batch = 4;
          e.shape.context = ctx;
          e.warmup = warmup;
          e.passes = forward_only ? model::E2ePasses::kForward : model::E2ePasses::kForwardBackward;
          std::cerr << fmt::format("[{}/{}] {} ctx {}, {} warm-up step{}, {}\n", results.size() + 1, runs, m.name,
                                   ctx, warmup, warmup == 1 ? "" : "s",
                                   forward_only ? "forward only" : "forward + backward");
          auto result = model::bench_e2e(e);
          if (!result.complete()) break;  // cut short by a signal: no row
          results.push_back(std::move(result));
          rows.push_back(model::to_json(results.back()));
        }
  const tuner::Completion completion = stop.completion(runs, results.size());
  // Every row says which sweep it belongs to and whether that sweep measured all its rows.
  for (auto& row : rows) {
    nlohmann::json sweep;
    completion.add_to(sweep);
    row["sweep"] = sweep;
  }
  std::set<std::string> warned;  // each run's; the same ones from each row's fresh model said once
  for (const auto& r : results)
    for (const auto& w : r.warnings)
      if (warned.insert(w).second) std::cerr << "warning: " << w << "\n";
  if (results.empty()) {  // stopped before the first row was measured
    std::cerr << "ktune: no row was measured; nothing is written\n";
    stop.finish(global, completion);
    return;
  }
  write_report(global, json_out, rows, [&] {
    std::string s = heading(results.front()) + seed002_header();
    for (const auto& r : results) s += seed002_row(r);
    s += "\neach row a run of its own: a fresh model on the same weights and batch, its warm-up steps, then its "
         "trials (mean and sample std, ms)\n\n";
    if (!completion.complete()) s += completion.markdown("runs") + "(the tables below are of the rows above)\n\n";
    s += "### Mean time by warm-up count (ms: each model's rows at that count)\n\n";
    // Each model's rows, as many as it has: a sweep cut short has fewer for its last model.
    s += warmup_table(results, runs / models.size(), warmups);
    s += "\n### Summary statistics (of the rows above)\n\n" + summary_table(results);
    return s;
  });
  stop.finish(global, completion, "runs");
}

}  // namespace

void add_bench_e2e_command(CLI::App& bench, Global& global) {
  struct Opts {
    ModelArgs m;
    model::E2eOptions e;
    bool forward_only = false, with_optimizer = false, sweep = false;
    std::string json_out;
  };
  auto o = std::make_shared<Opts>();
  o->m.model = "small";
  auto* cmd = bench.add_subcommand("e2e", "End-to-end training step (seeds 002/004): forward, backward, optimizer "
                                          "mean and std over trials");
  add_model_options(cmd, o->m, {.ctx = 128, .batch = 4});
  add_recompute_option(cmd, o->m, true);
  add_backend_options(cmd, o->m);
  add_deterministic_option(cmd, o->m);
  cmd->add_option("--warmup", o->e.warmup, "Warm-up steps (not timed)")
      ->check(integer_at_least(0))
      ->capture_default_str();
  cmd->add_option("--trials", o->e.trials, "Timed steps")->check(integer_at_least(1))->capture_default_str();
  auto* fo = cmd->add_flag("--forward-only", o->forward_only, "Time the forward pass only");
  auto* with_optimizer = cmd->add_flag("--with-optimizer", o->with_optimizer, "Also time the AdamW step")->excludes(fo);
  cmd->add_option("--clip-norm", o->e.clip_norm,
                  "With --with-optimizer: clip the gradients by their global L2 norm to at most this in the step; "
                  "0: no clipping, as the PyTorch peer")
      ->check(fp32_at_least(0))
      ->capture_default_str()
      ->needs(with_optimizer);
  cmd->add_option("--json-out", o->json_out, "Also write the result as JSON to this file")->check(output_file());
  cmd->add_option("--weights", o->e.weights, "Start from these safetensors weights (default: the seed-0 init)")
      ->check(input_file());
  cmd->add_option("--save-batch", o->e.save_batch,
                  "Write the starting weights and the batch (tokens, targets) to this safetensors file, for a peer "
                  "to run the same step (bench/peers/torch_e2e.py)")->check(output_file());
  cmd->add_flag("--profile", o->e.profile,
                "After the timed trials, as many steps again with each op timed (its calls between two marks of "
                "the clock, and the host's time enqueuing them): a table per phase, op and shape, slowest first, with "
                "GEMMs' and attention's TFLOP/s");
  auto* sweep = cmd->add_flag(
      "--sweep", o->sweep,
      "Seed 002's grid for --model (several, comma-separated: --model small,medium) in one table: context 128 and "
      "256, 0, 1 and 5 warm-up steps, forward only and forward + backward; batch 4, 10 trials; each row a run of "
      "its own (a fresh model, its first trial cold); then the seed's mean time by warm-up count per model and its "
      "summary statistics");
  for (const char* name : {"--ctx", "--batch", "--warmup", "--trials", "--forward-only", "--with-optimizer",
                           "--save-batch", "--profile"})
    sweep->excludes(cmd->get_option(name));
  cmd->callback([o, &global] {
    require_distinct_files({{"--weights", o->e.weights}, {"--cache", o->m.cache}},
                           {{"--json-out", o->json_out}, {"--save-batch", o->e.save_batch}});
    if (!o->json_out.empty()) writable_target(o->json_out, "--json-out");  // before the work, not after
    if (!o->e.save_batch.empty()) writable_target(o->e.save_batch, "--save-batch");
    model::E2eOptions e = o->e;
    // --sweep takes several models, comma-separated; every run one.
    std::vector<model::ModelConfig> models;
    KTUNE_REQUIRE(o->sweep || o->m.model.find(',') == std::string::npos,
                  fmt::format("--model {}: several models are a sweep; give --sweep, or one model", o->m.model));
    for (const auto& name : o->sweep ? distinct_list(name_list_arg(o->m.model, "--model"), "--model")
                                     : std::vector<std::string>{o->m.model}) {
      ModelArgs a = o->m;
      a.model = name;
      models.push_back(model_from_args(a));
    }
    e.model = models.front();
    e.shape = shape_from_args(o->m);
    e.backend = backend_from_args(o->m, threads_from_args(o->m));
    const auto& b = e.backend;
    e.passes = o->forward_only     ? model::E2ePasses::kForward
               : o->with_optimizer ? model::E2ePasses::kStep
                                   : model::E2ePasses::kForwardBackward;
    KTUNE_REQUIRE(!o->sweep || o->m.recompute != "auto",
                  "--recompute auto fits one run's shape, and --sweep runs several: give --recompute swiglu or blocks");
    // A forward alone keeps no activations for a backward; a forward and backward without the optimizer holds
    // no AdamW state (Allocation::kGradients), so its peak is the plan's forward+backward one.
    if (e.passes != model::E2ePasses::kForward)
      resolve_recompute(o->m, e.model, e.shape, b, global.json, model::e2e_allocation(e.passes));
    if (o->sweep) {
      run_sweep(e, models, o->json_out, global);
      return;
    }
    ProgressLine progress;
    const BenchStop stop;  // a signal ends the run after its step, the trials so far written, marked incomplete
    e.should_stop = stop.check();
    if (!global.json) {
      e.on_step = [&](std::int64_t done, std::int64_t steps) {
        progress.update(fmt::format("{} ctx {}: step {} of {} ({} warm-up)", e.model.name, e.shape.context, done,
                                    steps, e.warmup));
      };
    }
    const auto result = model::bench_e2e(e);
    progress.finish();
    const tuner::Completion completion = stop.completion(static_cast<std::size_t>(result.trials_planned),
                                                         static_cast<std::size_t>(result.options.trials));
    if (result.options.trials == 0) {  // stopped in the warm-up steps
      stop.finish(global, completion, "trials", false);
      return;
    }
    auto j = model::to_json(result);
    j["stopped_by"] = completion.stopped_by.empty() ? nlohmann::json() : nlohmann::json(completion.stopped_by);
    for (const auto& w : result.warnings) std::cerr << "warning: " << w << "\n";
    write_report(global, o->json_out, j, [&] { return markdown(result, completion.stopped_by); });
    stop.finish(global, completion, "trials");
  });
}

}  // namespace ktune::cli
