// What every recorded result is stamped with: ktune's version, the git
// revision it was built from, and the time in UTC.
#pragma once
#include <string>

namespace ktune {

/// "0.1.0"
std::string ktune_version();
/// Short git revision of the source tree at configure time ("unknown" outside git).
std::string git_revision();
/// Current time as "YYYY-MM-DDTHH:MM:SSZ".
std::string utc_now();

}  // namespace ktune
