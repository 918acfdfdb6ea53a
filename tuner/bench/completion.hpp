// A benchmark cut short by a stop signal (SIGINT, SIGTERM, SIGHUP) keeps
// what it measured: its report is written with the rows so far, and says
// that it is incomplete, in the markdown (a line) and the JSON ("complete":
// false, "stopped_by", how many rows were planned and measured).
#pragma once
#include <fmt/format.h>

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

namespace ktune::tuner {

struct Completion {
  std::string stopped_by;  ///< the signal's name ("SIGTERM"); empty where none came
  std::size_t planned = 0;   ///< what the run was to measure
  std::size_t measured = 0;  ///< what it measured
  /// Every planned row measured (a signal after the last one leaves the report whole).
  bool complete() const { return measured >= planned; }
  /// "" when complete; else a line: "**Incomplete:** stopped by SIGTERM after 3 of 10 rows ...".
  std::string markdown(const std::string& unit = "rows") const {
    if (complete()) return "";
    return fmt::format("**Incomplete:** stopped by {} after {} of {} {}; the {} measured are above, the rest were "
                       "not run.\n\n",
                       stopped_by.empty() ? "a stop request" : stopped_by, measured, planned, unit, unit);
  }
  /// Adds "complete", "stopped_by" (null where none came), "rows_planned" and "rows_measured" to a report.
  void add_to(nlohmann::json& j) const {
    j["complete"] = complete();
    j["stopped_by"] = stopped_by.empty() ? nlohmann::json() : nlohmann::json(stopped_by);
    j["rows_planned"] = planned;
    j["rows_measured"] = measured;
  }
};

}  // namespace ktune::tuner
