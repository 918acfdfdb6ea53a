// A launch's arguments against its kernel's parameters: the check both
// backends make before a launch (see backend.hpp).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.hpp"
#include "tuner/exec/backend.hpp"

namespace ktune::tuner::exec {

void check_argument_sizes(const std::string& where, const std::string& kernel, const std::vector<std::size_t>& want,
                          const std::vector<std::size_t>& given) {
  if (want == given) return;
  throw_error(ErrorKind::kCheckFailed,
              fmt::format("{}: kernel {} takes {} parameters of {} bytes; the launch passes {} arguments of {} bytes "
                          "(a kernel spec's args must match the kernel's parameters, in order)",
                          where, kernel, want.size(), fmt::join(want, ", "), given.size(), fmt::join(given, ", ")));
}

}  // namespace ktune::tuner::exec
