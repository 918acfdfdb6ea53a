#include "base/stamp.hpp"

#include <cctype>
#include <ctime>
#include <fstream>
#include <sstream>

#ifndef KTUNE_VERSION
#define KTUNE_VERSION "unknown"
#endif
#include "revision.inc"  // KTUNE_GIT_REVISION, written at each build (cmake/Revision.cmake)

namespace ktune {

std::string ktune_version() { return KTUNE_VERSION; }
std::string git_revision() { return KTUNE_GIT_REVISION; }

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string parse_nvidia_driver_release(const std::string& text) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("NVRM version:", 0) != 0) continue;
    std::istringstream words(line);
    for (std::string w; words >> w;) {
      bool digits = std::isdigit(static_cast<unsigned char>(w.front())) != 0, dot = false;
      for (const char c : w) {
        dot = dot || c == '.';
        digits = digits && (std::isdigit(static_cast<unsigned char>(c)) || c == '.');
      }
      if (digits && dot && w.back() != '.') return w;
    }
  }
  return "";
}

std::string nvidia_driver_release(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::ostringstream text;
  text << in.rdbuf();
  return parse_nvidia_driver_release(text.str());
}

}  // namespace ktune
