// Host-clock marks (see backend.hpp): what a backend whose work is complete
// when it is enqueued times its phases with.
#include <chrono>

#include "base/error.hpp"
#include "tuner/exec/backend.hpp"

namespace ktune::tuner::exec {
namespace {

struct HostMark final : Mark {
  std::chrono::steady_clock::time_point at = std::chrono::steady_clock::now();
};

const HostMark& host(const Mark& m) {
  const auto* h = dynamic_cast<const HostMark*>(&m);
  KTUNE_REQUIRE(h != nullptr, "a mark of another backend");
  return *h;
}

}  // namespace

std::unique_ptr<Mark> host_mark() { return std::make_unique<HostMark>(); }

double host_elapsed_ms(const Mark& from, const Mark& to) {
  return std::chrono::duration<double, std::milli>(host(to).at - host(from).at).count();
}

}  // namespace ktune::tuner::exec
