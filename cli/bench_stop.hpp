// SIGINT, SIGTERM and SIGHUP during a benchmark (GNU timeout's SIGTERM, a
// closed terminal): it stops after the measurement under way, writes its
// markdown and JSON with the rows measured so far, marked incomplete
// (tuner/bench/completion.hpp), and exits with 128 + the signal, as `train`
// and `tune` do. A second signal a second or more after the first ends it at
// once, with nothing written.
#pragma once
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/stop_signals.hpp"
#include "tuner/bench/completion.hpp"

namespace ktune::cli {

class BenchStop {
 public:
  BenchStop();
  /// Whether a stop signal came: for the benchmark's loop, between measurements.
  bool requested() const { return signals_.caught() != 0; }
  /// requested(), as the benchmarks' loops take it.
  std::function<bool()> check() const {
    return [this] { return requested(); };
  }
  /// The report's completion: `measured` of `planned`, stopped by the signal that came (if one did).
  tuner::Completion completion(std::size_t planned, std::size_t measured) const;
  /// Once the report is written (or, `written` false, found empty and left unwritten): where a signal came,
  /// says on stderr what was kept and sets the exit status to 128 + the signal.
  void finish(Global& global, const tuner::Completion& c, const std::string& unit = "rows",
              bool written = true) const;

 private:
  StopSignals signals_;
};

/// A benchmark's report out, once measured: as JSON into `json_out` where one is given (checked writable before
/// the work), then on stdout, as JSON under --json, else as `markdown()` makes it.
void write_report(const Global& global, const std::string& json_out, const nlohmann::json& report,
                  const std::function<std::string()>& markdown);

}  // namespace ktune::cli
