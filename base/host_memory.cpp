// Available host memory (see host_memory.hpp).
#include "base/host_memory.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "base/error.hpp"

namespace ktune {

std::int64_t available_host_memory() {
  std::ifstream meminfo("/proc/meminfo");
  for (std::string name; meminfo >> name;) {
    std::int64_t kib = 0;
    if (name == "MemAvailable:" && meminfo >> kib) return kib * 1024;
    meminfo.ignore(1 << 10, '\n');
  }
  const long pages = ::sysconf(_SC_AVPHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<std::int64_t>(pages) * page : 0;
}

void require_host_memory(std::int64_t bytes, std::string_view what, std::string_view remedy) {
  const std::int64_t available = available_host_memory();
  auto gib = [](std::int64_t b) { return static_cast<double>(b) / (1024.0 * 1024 * 1024); };
  KTUNE_REQUIRE(available == 0 || bytes <= available,
                fmt::format("{} needs {} bytes ({:.2f} GiB) of host memory, more than the {} bytes ({:.2f} GiB) "
                            "available; {}",
                            what, bytes, gib(bytes), available, gib(available), remedy));
}

}  // namespace ktune
