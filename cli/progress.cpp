#include "cli/progress.hpp"

#include <unistd.h>

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

void ProgressLine::finish() {
  if (terminal_ && shown_) std::cerr << "\n";
  else if (!terminal_ && !last_.empty()) std::cerr << last_ << "\n";
  std::cerr << std::flush;
  shown_ = false;
  last_.clear();
}

}  // namespace ktune::cli
