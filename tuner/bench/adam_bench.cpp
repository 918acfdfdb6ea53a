#include "tuner/bench/adam_bench.hpp"

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/stamp.hpp"
#include "templates/adamw/adamw.hpp"
#include "tuner/bench/copy_text.hpp"
#include "tuner/session/tuned_kernels.hpp"

namespace ktune::tuner {

std::string AdamBenchReport::markdown() const {
  std::string s = fmt::format("Device: {}; {}; {}; ktune {} (git {}); {}\n\n", device, driver_text(driver_version),
                              date, ktune_version(), git_revision(), copy_bandwidth_text(copy_bandwidth_gbs));
  // Every column is ktune's: seeds 000/001's order (compiled_single_tensor_adam, _single_tensor_adam,
  // _fused_adam), but not PyTorch's names, which bench/peers/torch_adam.py prints for PyTorch's own.
  s += "All three forms are ktune's kernels, in seeds 000/001's column order (compiled_single_tensor_adam, "
       "_single_tensor_adam, _fused_adam); PyTorch's are bench/peers/torch_adam.py's (fp32).\n\n";
  if (bytes_per_element > 0)
    s += fmt::format("Parameters {}: the fused step moves {:.4g} bytes an element, as its GB/s counts them.\n\n",
                     dtype, bytes_per_element);
  s += "| Num Params | Param Size | ktune per-tensor fused (adamw_single) | ktune eager chain (adamw_eager) "
       "| ktune fused multi-tensor (adamw) | fused GB/s | % of copy BW | fused config (source) |\n";
  s += "|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : rows)
    s += fmt::format("| {} | {} | {:.4f} ms/iter | {:.4f} ms/iter | {:.4f} ms/iter | {} | {} | {} ({}) |\n",
                     r.tensors, r.numel, r.single_ms, r.eager_ms, r.fused_ms, gbs_cell(r.fused_gbs, copy_bandwidth_gbs),
                     percent_of_copy(r.fused_fraction_of_copy, copy_bandwidth_gbs), r.fused_config, r.fused_source);
  s += "\n" + method + "\n";
  if (!completion.complete()) s += "\n" + completion.markdown();
  return s;
}

nlohmann::json AdamBenchReport::to_json() const {
  nlohmann::json j = {{"benchmark", "adam"},        {"device", device}, {"date", date},
                      {"git_revision", git_revision()},   {"ktune_version", ktune_version()},
                      {"copy_bandwidth_gbs", measured_or_null(copy_bandwidth_gbs)}, {"method", method},
                      {"dtype", dtype}, {"bytes_per_element", bytes_per_element}};
  add_driver(j, driver_version);
  for (const auto& r : rows)
    j["rows"].push_back({{"tensors", r.tensors}, {"numel", r.numel}, {"dtype", r.dtype},
                         {"per_tensor_fused_ms", r.single_ms}, {"eager_chain_ms", r.eager_ms},
                         {"per_tensor_fused_samples_ms", r.single_samples_ms},
                         {"eager_chain_samples_ms", r.eager_samples_ms}, {"fused_samples_ms", r.fused_samples_ms},
                         {"fused_ms", r.fused_ms}, {"fused_p20_ms", r.fused_p20_ms}, {"fused_p80_ms", r.fused_p80_ms},
                         {"fused_gbs", copy_bandwidth_gbs > 0 ? nlohmann::json(r.fused_gbs) : nlohmann::json()},
                         {"fused_fraction_of_copy", measured_or_null(copy_bandwidth_gbs > 0 ? r.fused_fraction_of_copy
                                                                                           : 0.0)},
                         {"fused_config", r.fused_config}, {"fused_config_source", r.fused_source}});
  if (rows.empty()) j["rows"] = nlohmann::json::array();
  completion.add_to(j);
  return j;
}

AdamBenchReport run_adam_bench(Runner& runner, const std::vector<std::int64_t>& tensors,
                               const std::vector<std::int64_t>& numels, const std::string& dtype,
                               const cache::TunedCache* tuned, double copy_bandwidth_gbs,
                               const std::function<void(const AdamBenchRow&)>& progress,
                               const std::function<bool()>& should_stop) {
  AdamBenchReport report;
  report.completion.planned = tensors.size() * numels.size();
  report.device = runner.device().name + " (" + runner.device().arch + ")";
  report.driver_version = runner.device().driver_version;
  report.date = utc_now();
  report.copy_bandwidth_gbs = copy_bandwidth_gbs;
  report.dtype = dtype;
  RunOptions run;
  run.validate = true;
  run.time = true;
  for (const auto numel : numels) {
    for (const auto n : tensors) {
      if (should_stop && should_stop()) break;  // after the row under way: the rows so far are the report
      const templates::Problem problem{dtype, {{"tensors", n}, {"numel", numel}}};
      AdamBenchRow row;
      row.tensors = n;
      row.numel = numel;
      row.dtype = dtype;
      auto time = [&](const templates::Family& f, ChosenConfig chosen) {
        const RunResult r = runner.run(f, chosen.config, problem, run);
        if (!r.ok || !r.timing)
          throw_error(ErrorKind::kCheckFailed,
                      fmt::format("{} {} failed on {}: {}", f.name(), chosen.config.str(), problem.key(), r.failure));
        // The fused column's method heads the report (the eager column's first
        // timing would describe its eight launches as everyone's).
        if (report.method.empty() && &f == &templates::adamw::multi_tensor_family()) report.method = r.timing->method;
        return *r.timing;
      };
      const auto& dev = runner.device();
      auto chosen_for = [&](const templates::Family& f, const cache::TunedCache* cache) {
        return choose_config(f, problem, dev, cache, &report.warnings);
      };
      const Measurement eager =
          time(templates::adamw::eager_family(), chosen_for(templates::adamw::eager_family(), nullptr));
      row.eager_ms = eager.median_ms;
      row.eager_samples_ms = eager.samples_ms;
      const Measurement single =
          time(templates::adamw::single_tensor_family(), chosen_for(templates::adamw::single_tensor_family(), tuned));
      row.single_ms = single.median_ms;
      row.single_samples_ms = single.samples_ms;
      const auto chosen = chosen_for(templates::adamw::multi_tensor_family(), tuned);
      const Measurement fused = time(templates::adamw::multi_tensor_family(), chosen);
      row.fused_ms = fused.median_ms;
      row.fused_p20_ms = fused.p20_ms;
      row.fused_p80_ms = fused.p80_ms;
      row.fused_samples_ms = fused.samples_ms;
      row.fused_config = chosen.config.str();
      row.fused_source = chosen.source;
      const double bytes = templates::adamw::multi_tensor_family().bytes(problem);
      report.bytes_per_element = bytes / static_cast<double>(n * numel);
      row.fused_gbs = bytes / (fused.median_ms * 1e-3) / 1e9;
      row.fused_fraction_of_copy = copy_bandwidth_gbs > 0 ? row.fused_gbs / copy_bandwidth_gbs : 0;
      report.rows.push_back(row);
      report.completion.measured = report.rows.size();
      if (progress) progress(row);
    }
  }
  report.method += "; the eager and single-tensor columns timed the same way around all their launches of one "
                   "step; times are whole optimizer steps over all tensors, inputs reset before validation only";
  return report;
}

}  // namespace ktune::tuner
