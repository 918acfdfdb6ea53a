#include "base/stamp.hpp"

#include <ctime>

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

}  // namespace ktune
