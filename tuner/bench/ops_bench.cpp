#include "tuner/bench/ops_bench.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "base/error.hpp"
#include "base/stamp.hpp"
#include "templates/eager/eager.hpp"
#include "tuner/bench/copy_text.hpp"
#include "tuner/session/tuned_kernels.hpp"

namespace ktune::tuner {
namespace {

/// A family's workload on the backend: inputs uploaded, outputs poisoned.
struct DeviceWorkload {
  templates::Workload workload;
  std::vector<std::unique_ptr<exec::Buffer>> buffers;
  std::vector<std::uint64_t> addresses;

  DeviceWorkload(exec::Backend& b, const templates::Family& f, const templates::Problem& p, std::uint64_t seed)
      : workload(f.make_workload(p, seed)) {
    for (const auto& hb : workload.buffers) {
      buffers.push_back(b.allocate(hb.bytes.size(), hb.name));
      addresses.push_back(buffers.back()->address());
    }
    reset(b);
  }
  void reset(exec::Backend& b) {
    for (std::size_t i = 0; i < buffers.size(); ++i) {
      const auto& hb = workload.buffers[i];
      if (hb.role == templates::Role::kOutput) b.poison(*buffers[i]);
      else b.upload(*buffers[i], hb.bytes.data(), hb.bytes.size());
    }
  }
  /// Inputs drawn otherwise for timing (HostBuffer::timed), after a check.
  void time_from(exec::Backend& b) {
    for (std::size_t i = 0; i < buffers.size(); ++i)
      if (const auto& hb = workload.buffers[i]; !hb.timed.empty())
        b.upload(*buffers[i], hb.timed.data(), hb.timed.size());
  }
  /// Throws unless every output matches the reference.
  void check(exec::Backend& b, const std::string& what) const {
    for (std::size_t i = 0; i < buffers.size(); ++i) {
      const auto& hb = workload.buffers[i];
      if (hb.role != templates::Role::kOutput && hb.role != templates::Role::kInOut) continue;
      std::vector<std::byte> got(hb.bytes.size());
      b.download(got.data(), *buffers[i], got.size());
      templates::require_match(hb, got, what);
    }
  }
};

/// "a" or "a-b" with `digits` decimals and `unit`, a range over a summary's shapes.
std::string range(double lo, double hi, const char* unit, int digits) {
  const std::string a = fmt::format("{:.{}f}", lo, digits), b = fmt::format("{:.{}f}", hi, digits);
  return a == b ? a + unit : a + "-" + b + unit;
}

}  // namespace

bool OpsBenchSummary::meets(const OpsBenchRow& r) {
  if (r.bytes >= kLargeBytes) return r.fused_fraction_of_copy >= kLargeTarget;
  return r.floor_ms > 0 && r.fused_ms <= kFloorTarget * r.floor_ms;
}

std::vector<OpsBenchSummary> OpsBenchReport::summary() const {
  std::vector<OpsBenchSummary> out;
  for (const auto& r : rows) {
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& s) { return s.family == r.op.family; });
    const bool first = it == out.end();
    if (first) it = out.insert(out.end(), OpsBenchSummary{r.op.family});
    OpsBenchSummary& s = *it;
    const double ratio = r.floor_ms > 0 ? r.fused_ms / r.floor_ms : 0.0;
    const double speedup = r.fused_ms > 0 ? r.eager_ms / r.fused_ms : 0.0;
    s.floor_ratio_min = first ? ratio : std::min(s.floor_ratio_min, ratio);
    s.floor_ratio_max = first ? ratio : std::max(s.floor_ratio_max, ratio);
    s.speedup_min = first ? speedup : std::min(s.speedup_min, speedup);
    s.speedup_max = first ? speedup : std::max(s.speedup_max, speedup);
    if (r.bytes >= OpsBenchSummary::kLargeBytes) {
      const double f = r.fused_fraction_of_copy;
      s.large_copy_min = s.large_shapes == 0 ? f : std::min(s.large_copy_min, f);
      s.large_copy_max = s.large_shapes == 0 ? f : std::max(s.large_copy_max, f);
      ++s.large_shapes;
    }
    ++s.shapes;
    if (OpsBenchSummary::meets(r)) ++s.met;
  }
  return out;
}

std::string OpsBenchReport::markdown() const {
  std::string s = fmt::format("Device: {}; {}; {}; ktune {} (git {}); {}; empty launch {:.4f} ms\n\n", device,
                              driver_text(driver_version), date, ktune_version(), git_revision(),
                              copy_bandwidth_text(copy_bandwidth_gbs), empty_launch_ms);
  if (programmatic) s += "Kernels (eager and fused) launched with programmatic dependent launch.\n\n";
  if (copy_bandwidth_gbs > 0) s += summary_markdown();
  s += "| model | ctx | op | problem | MB | eager (launches) | eager GB/s | eager % copy | fused (launches) | "
       "fused GB/s | fused % copy | floor | fused / floor | fused config (source) |\n";
  s += "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  // Without a copy bandwidth (the emulation) there is no floor: its traffic cannot be timed, and an empty
  // launch's host time alone is no floor for the rows' host times. "-", as % of copy.
  const bool floor = copy_bandwidth_gbs > 0;
  for (const auto& r : rows)
    s += fmt::format("| {} | {} | {} | {} | {:.1f} | {:.4f} ms ({}) | {} | {} | {:.4f} ms ({}) | {} | {} | "
                     "{} | {} | {} ({}) |\n",
                     r.op.model, r.op.context, r.op.family, r.op.problem.key(), r.bytes / 1e6, r.eager_ms,
                     r.eager_launches, gbs_cell(r.eager_gbs, copy_bandwidth_gbs),
                     percent_of_copy(r.eager_fraction_of_copy, copy_bandwidth_gbs), r.fused_ms, r.fused_launches,
                     gbs_cell(r.fused_gbs, copy_bandwidth_gbs),
                     percent_of_copy(r.fused_fraction_of_copy, copy_bandwidth_gbs),
                     floor ? fmt::format("{:.4f} ms", r.floor_ms) : std::string("-"),
                     floor && r.floor_ms > 0 ? fmt::format("{:.2f}x", r.fused_ms / r.floor_ms) : std::string("-"),
                     r.fused_config, r.fused_source);
  s += "\n" + method + "\n";
  if (!completion.complete()) s += "\n" + completion.markdown();
  return s;
}

std::string OpsBenchReport::summary_markdown() const {
  std::string s = fmt::format(
      "Per op over its shapes; target: at least {:.0f}% of copy where the fused kernel moves {:.0f} MB or more, "
      "within {:.1f}x of the floor below that.\n\n",
      100 * OpsBenchSummary::kLargeTarget, OpsBenchSummary::kLargeBytes / 1e6, OpsBenchSummary::kFloorTarget);
  s += fmt::format("| op | shapes at target | fused / floor | fused % copy at >= {:.0f} MB | eager / fused |\n",
                   OpsBenchSummary::kLargeBytes / 1e6);
  s += "|---|---|---|---|---|\n";
  for (const auto& o : summary())
    s += fmt::format("| {} | {} of {} | {} | {} | {} |\n", o.family, o.met, o.shapes,
                     range(o.floor_ratio_min, o.floor_ratio_max, "x", 2),
                     o.large_shapes == 0 ? std::string("-")
                                         : fmt::format("{} ({} shape{})", range(100 * o.large_copy_min,
                                                                                 100 * o.large_copy_max, "%", 0),
                                                       o.large_shapes, o.large_shapes == 1 ? "" : "s"),
                     range(o.speedup_min, o.speedup_max, "x", 1));
  s += "\n";
  return s;
}

nlohmann::json OpsBenchReport::to_json() const {
  nlohmann::json j = {{"benchmark", "ops"},
                      {"device", device},
                      {"date", date},
                      {"git_revision", git_revision()},
                      {"ktune_version", ktune_version()},
                      {"copy_bandwidth_gbs", measured_or_null(copy_bandwidth_gbs)},
                      {"empty_launch_ms", empty_launch_ms},
                      {"programmatic_launch", programmatic},
                      {"method", method},
                      {"summary", nlohmann::json::array()},
                      {"rows", nlohmann::json::array()}};
  add_driver(j, driver_version);
  // Fractions of a copy bandwidth there is none of (the emulation's) are null, and so is the count of shapes at
  // target, which holds them to that bandwidth or to a floor there is none of either (the markdown has no summary).
  const auto of_copy = [&](double fraction) { return measured_or_null(copy_bandwidth_gbs > 0 ? fraction : 0.0); };
  for (const auto& o : summary())
    j["summary"].push_back({{"family", o.family},
                            {"shapes", o.shapes},
                            {"shapes_at_target", copy_bandwidth_gbs > 0 ? nlohmann::json(o.met) : nlohmann::json()},
                            {"fused_over_floor", copy_bandwidth_gbs > 0
                                                     ? nlohmann::json{o.floor_ratio_min, o.floor_ratio_max}
                                                     : nlohmann::json()},
                            {"large_shapes", o.large_shapes},
                            {"large_fused_fraction_of_copy",
                             o.large_shapes > 0 ? nlohmann::json{of_copy(o.large_copy_min), of_copy(o.large_copy_max)}
                                                : nlohmann::json()},
                            {"eager_over_fused", {o.speedup_min, o.speedup_max}}});
  for (const auto& r : rows)
    j["rows"].push_back({{"model", r.op.model},
                         {"context_length", r.op.context},
                         {"family", r.op.family},
                         {"problem", r.op.problem.to_json()},
                         {"bytes", r.bytes},
                         {"eager_ms", r.eager_ms},
                         {"eager_launches", r.eager_launches},
                         {"eager_gbs", copy_bandwidth_gbs > 0 ? nlohmann::json(r.eager_gbs) : nlohmann::json()},
                         {"eager_fraction_of_copy", of_copy(r.eager_fraction_of_copy)},
                         {"fused_ms", r.fused_ms},
                         {"fused_launches", r.fused_launches},
                         {"fused_p20_ms", r.fused_p20_ms},
                         {"fused_p80_ms", r.fused_p80_ms},
                         {"fused_samples_ms", r.fused_samples_ms},
                         {"eager_samples_ms", r.eager_samples_ms},
                         {"fused_gbs", copy_bandwidth_gbs > 0 ? nlohmann::json(r.fused_gbs) : nlohmann::json()},
                         {"fused_fraction_of_copy", of_copy(r.fused_fraction_of_copy)},
                         {"floor_ms", copy_bandwidth_gbs > 0 ? nlohmann::json(r.floor_ms) : nlohmann::json()},
                         {"fused_config", r.fused_config},
                         {"fused_config_source", r.fused_source}});
  completion.add_to(j);
  return j;
}

OpsBenchReport run_ops_bench(exec::Backend& backend, const std::vector<OpsBenchCase>& cases,
                             const cache::TunedCache* tuned, double copy_bandwidth_gbs, const RunOptions& options,
                             const std::function<void(const OpsBenchRow&)>& progress,
                             const std::function<bool()>& should_stop) {
  OpsBenchReport report;
  report.completion.planned = cases.size();
  const DeviceLimits& device = backend.device();
  report.device = device.name + " (" + device.arch + ")";
  report.driver_version = device.driver_version;
  report.date = utc_now();
  report.programmatic = backend.launches_programmatically();
  report.copy_bandwidth_gbs = copy_bandwidth_gbs;

  std::string empty_method;
  {  // The empty launch: one thread of a primitive, the cost every launch pays.
    const auto& f = templates::eager::unary_family(templates::eager::Unary::kScale);
    const templates::Problem p{"f32", {{"n", 1}}};
    DeviceWorkload w(backend, f, p, 1);
    const auto module = backend.load(f.render(f.default_config(p), p));
    const auto plan = f.plan(f.default_config(p), p, w.addresses, device);
    const Measurement m = backend.time([&] { backend.launch(*module, plan); }, options, "empty launch");
    report.empty_launch_ms = m.median_ms;
    empty_method = m.method;
  }
  // How the rows were timed heads the report: the first row's fused measurement, in words that hold for every
  // row (its repetition count is the first row's); the empty launch's own method comes after.
  const std::string rows_what = "each row's fused launches (its eager chain's timed apart the same way)";

  for (const auto& c : cases) {
    if (should_stop && should_stop()) break;  // after the row under way: the rows so far are the report
    const templates::Family& family = templates::find_family(c.family);
    OpsBenchRow row;
    row.op = c;
    row.bytes = family.bytes(c.problem);
    DeviceWorkload w(backend, family, c.problem, options.seed);
    const std::string what = fmt::format("{} {}", c.family, c.problem.key());

    // Fused: the tuned config (or the default), its workspace.
    const ChosenConfig chosen = choose_config(family, c.problem, device, tuned, &report.warnings);
    row.fused_config = chosen.config.str();
    row.fused_source = chosen.source;
    std::vector<std::uint64_t> addresses = w.addresses;
    std::unique_ptr<exec::Buffer> workspace;
    if (const std::size_t ws = family.workspace_bytes(chosen.config, c.problem); ws > 0) {
      workspace = backend.allocate(ws, "workspace");
      for (std::size_t i = 0; i < w.workload.buffers.size(); ++i)
        if (w.workload.buffers[i].role == templates::Role::kScratch) addresses[i] = workspace->address();
    }
    const auto fused_module = backend.load(family.render(chosen.config, c.problem));
    const auto fused_plan = family.plan(chosen.config, c.problem, addresses, device);
    backend.launch(*fused_module, fused_plan);
    backend.synchronize();
    w.check(backend, what + " fused");
    w.time_from(backend);
    const Measurement fused = backend.time([&] { backend.launch(*fused_module, fused_plan); }, options, rows_what);
    if (report.method.empty())
      report.method = fused.method + " (repetitions: the first row's count; each measurement repeats as its time "
                                     "asks)";
    row.fused_ms = fused.median_ms;
    row.fused_p20_ms = fused.p20_ms;
    row.fused_p80_ms = fused.p80_ms;
    row.fused_samples_ms = fused.samples_ms;
    row.fused_launches = static_cast<int>(fused_plan.size());

    // Eager: the chain over the same buffers and its temporaries.
    w.reset(backend);
    const auto bindings = templates::eager::bind_workload(c.family, c.problem, w.addresses);
    const std::size_t temp_bytes = templates::eager::temporaries_bytes(c.family, c.problem);
    const auto temps = backend.allocate(std::max<std::size_t>(temp_bytes, 256), "temporaries");
    const auto chain = templates::eager::plan(c.family, c.problem, bindings, temps->address(), device);
    std::vector<std::shared_ptr<const exec::Module>> modules;
    for (const auto& s : chain.steps) modules.push_back(backend.load(s.family->render(s.config, s.problem)));
    auto run_chain = [&] {
      for (std::size_t i = 0; i < chain.steps.size(); ++i) backend.launch(*modules[i], chain.steps[i].launches);
    };
    run_chain();
    backend.synchronize();
    w.check(backend, what + " eager");
    w.time_from(backend);
    const Measurement eager = backend.time(run_chain, options, rows_what);
    row.eager_ms = eager.median_ms;
    row.eager_samples_ms = eager.samples_ms;
    for (const auto& s : chain.steps) row.eager_launches += static_cast<int>(s.launches.size());

    row.floor_ms = (copy_bandwidth_gbs > 0 ? row.bytes / (copy_bandwidth_gbs * 1e9) * 1e3 : 0) + report.empty_launch_ms;
    row.fused_gbs = row.bytes / (row.fused_ms * 1e-3) / 1e9;
    row.eager_gbs = row.bytes / (row.eager_ms * 1e-3) / 1e9;
    row.fused_fraction_of_copy = copy_bandwidth_gbs > 0 ? row.fused_gbs / copy_bandwidth_gbs : 0;
    row.eager_fraction_of_copy = copy_bandwidth_gbs > 0 ? row.eager_gbs / copy_bandwidth_gbs : 0;
    report.rows.push_back(row);
    report.completion.measured = report.rows.size();
    if (progress) progress(row);
  }
  report.method += "; the floor's empty launch: " + empty_method +
                   "; GB/s and % of copy count the fused family's minimum traffic for both (each input read "
                   "and each output written once; a gather's table rows once per token, repeated ids included), "
                   "and the floor holds the op to one empty launch however many its plan makes; outputs checked "
                   "against the CPU reference before timing";
  return report;
}

}  // namespace ktune::tuner
