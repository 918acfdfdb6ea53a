// examples/vector_add through the run-time API: its kernel for n elements,
// x and y fresh random values uploaded, z poisoned (NaN) until a launch
// writes x + y. Shared by the emu and gpu tests of Kernel::launch.
#pragma once
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "ktune/ktune.hpp"

namespace ktune::test {

struct VectorAddRun {
  Runtime& rt;
  std::int64_t n;
  std::size_t bytes = static_cast<std::size_t>(n) * sizeof(float);
  Kernel kernel = rt.kernel(
      (std::filesystem::path(KTUNE_SOURCE_DIR) / "examples/vector_add/vector_add.json").string(), {"f32", {{"n", n}}});
  std::vector<float> x = random(), y = random();
  std::uint64_t dx = upload(x), dy = upload(y), dz = rt.allocate(bytes);

  /// The buffers in the kernel's order.
  std::vector<std::uint64_t> buffers() const { return {dx, dy, dz}; }
  void poison_z() {
    const std::vector<unsigned char> poison(bytes, 0xFF);
    rt.upload(dz, poison.data(), bytes);
  }
  std::vector<float> z() {
    std::vector<float> host(static_cast<std::size_t>(n));
    rt.download(host.data(), dz, bytes);
    return host;
  }

 private:
  std::vector<float> random() const {
    std::mt19937 rng(std::random_device{}());
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> v(static_cast<std::size_t>(n));
    for (auto& e : v) e = dist(rng);
    return v;
  }
  std::uint64_t upload(const std::vector<float>& host) {
    const std::uint64_t address = rt.allocate(bytes);
    rt.upload(address, host.data(), bytes);
    return address;
  }
};

}  // namespace ktune::test
