#include "cli/bench_stop.hpp"

#include <fmt/format.h>

#include <iostream>

namespace ktune::cli {

BenchStop::BenchStop()
    : signals_(true,
               "\nktune: stopping after the measurement under way; the rows measured are written, marked incomplete "
               "(again: stop at once)\n",
               nullptr, "\nktune: stopped at once: nothing is written\n") {}

tuner::Completion BenchStop::completion(std::size_t planned, std::size_t measured) const {
  tuner::Completion c;
  c.planned = planned;
  c.measured = measured;
  if (const int signal = signals_.caught()) c.stopped_by = StopSignals::name(signal);
  return c;
}

void BenchStop::finish(Global& global, const tuner::Completion& c, const std::string& unit) const {
  const int signal = signals_.caught();
  if (signal == 0) return;
  std::cerr << fmt::format("stopped by {} after {} of {} {}{}\n", StopSignals::name(signal), c.measured, c.planned,
                           unit, c.complete() ? " (all of them)" : "; the report says it is incomplete");
  global.exit_code = 128 + signal;
}

}  // namespace ktune::cli
