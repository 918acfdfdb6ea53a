// Progress on stderr that reads well wherever it goes: on a terminal one line
// rewritten in place; elsewhere (a log file, CI) a full line at most every
// few seconds, so a long run neither floods its log nor writes one 40 KB line.
#pragma once
#include <chrono>
#include <string>

namespace ktune::cli {

class ProgressLine {
 public:
  /// `interval_s`: the least time between two lines when stderr is not a terminal.
  explicit ProgressLine(double interval_s = 5.0);
  ~ProgressLine();
  /// Shows `text` now on a terminal; elsewhere when the interval has passed.
  void update(const std::string& text);
  /// Prints `line` (a warning) on a line of its own above the progress, which stays shown after it.
  void note(const std::string& line);
  /// Ends the progress: the last text stays (on a terminal, the line is closed).
  void finish();
  /// Whether stderr is a terminal (where the line is rewritten in place).
  bool terminal() const { return terminal_; }

 private:
  bool terminal_;
  double interval_s_;
  bool shown_ = false;
  std::string last_;
  std::chrono::steady_clock::time_point last_time_{};
};

/// A time left or taken, to the second below an hour, to the minute above:
/// "42 s", "3 min 12 s", "2 h 05 min".
std::string format_duration(double seconds);

}  // namespace ktune::cli
