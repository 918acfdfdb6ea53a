#include "cli/progress.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <iostream>

namespace ktune::cli {

ProgressLine::ProgressLine(double interval_s) : terminal_(::isatty(STDERR_FILENO) == 1), interval_s_(interval_s) {}

ProgressLine::~ProgressLine() { finish(); }

void ProgressLine::update(const std::string& text) {
  last_ = text;
  const auto now = std::chrono::steady_clock::now();
  if (terminal_) {
    std::cerr << "\r\033[K" << text << std::flush;
    shown_ = true;
    return;
  }
  if (shown_ && std::chrono::duration<double>(now - last_time_).count() < interval_s_) return;
  std::cerr << text << "\n" << std::flush;
  shown_ = true;
  last_time_ = now;
  last_.clear();  // already on its own line
}

void ProgressLine::note(const std::string& line) {
  if (terminal_ && shown_) {
    std::cerr << "\r\033[K" << line << "\n" << last_ << std::flush;
    return;
  }
  std::cerr << line << "\n" << std::flush;
}

void ProgressLine::finish() {
  if (terminal_ && shown_) std::cerr << "\n";
  else if (!terminal_ && !last_.empty()) std::cerr << last_ << "\n";
  std::cerr << std::flush;
  shown_ = false;
  last_.clear();
}

std::string format_duration(double seconds) {
  const auto s = static_cast<long long>(std::llround(std::max(seconds, 0.0)));
  if (s < 60) return fmt::format("{} s", s);
  if (s < 3600) return fmt::format("{} min {:02} s", s / 60, s % 60);
  const long long minutes = (s + 30) / 60;
  return fmt::format("{} h {:02} min", minutes / 60, minutes % 60);
}

}  // namespace ktune::cli
