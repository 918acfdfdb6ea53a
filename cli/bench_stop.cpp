#include "cli/bench_stop.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <iostream>

#include "base/files.hpp"
#include "base/json_output.hpp"
#include "tuner/cuda/gpu_marks.hpp"

namespace ktune::cli {

BenchStop::BenchStop()
    : signals_(true,
               "\nktune: stopping after the measurement under way; what was measured is written, marked incomplete "
               "(again: stop at once)\n",
               nullptr, "\nktune: stopped at once: nothing is written\n") {}

tuner::Completion BenchStop::completion(std::size_t planned, std::size_t measured) const {
  tuner::Completion c;
  c.planned = planned;
  c.measured = measured;
  if (const int signal = signals_.caught()) c.stopped_by = StopSignals::name(signal);
  return c;
}

void BenchStop::finish(Global& global, const tuner::Completion& c, const std::string& unit, bool written) const {
  const int signal = signals_.caught();
  if (signal == 0) return;
  std::cerr << fmt::format("stopped by {} after {} of {} {}{}\n", StopSignals::name(signal), c.measured, c.planned,
                           unit,
                           !written       ? "; nothing is written"
                           : c.complete() ? " (all of them)"
                                          : "; the report says it is incomplete");
  global.exit_code = 128 + signal;
}

void write_report(const Global& global, const std::string& json_out, const nlohmann::json& report,
                  const std::function<std::string()>& markdown) {
  // Other processes that used the GPU meanwhile: said, and kept with the figures they slowed.
  const std::vector<std::string> others = tuner::others_seen();
  for (const auto& other : others)
    std::cerr << tuner::shared_gpu_warning(other, "measure") << "\n";
  nlohmann::json j = report;
  if (!others.empty() && j.is_object()) j["shared_with"] = others;
  if (!others.empty() && j.is_array())  // a sweep's rows
    for (auto& row : j)
      if (row.is_object()) row["shared_with"] = others;
  if (!json_out.empty()) write_file_atomic(json_out, dump_json(j, 2) + "\n");
  std::cout << (global.json   ? dump_json(j, 2) + "\n"
                : others.empty() ? markdown()
                                 : markdown() + fmt::format("\nMeasured while other processes used this GPU: {}.\n",
                                                            fmt::join(others, "; ")));
}

}  // namespace ktune::cli
