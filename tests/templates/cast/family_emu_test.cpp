// Cast kernels run by the host emulation backend against the CPU reference:
// non-default configs on a ragged n (checked exactly: tolerance 0), and the
// paths the runner's workloads never take (misaligned pointers, a
// grid-stride loop over several tiles per block).
#include <catch2/catch.hpp>
#include <bit>
#include <cstring>
#include <memory>
#include <random>

#include "templates/cast/cast.hpp"
#include "templates/render.hpp"
#include "tuner/emu/memory.hpp"
#include "tuner/emu/module.hpp"
#include "tuner/emu_launch.hpp"
#include "tuner/run/emu_runner.hpp"

namespace templates_cast_family_emu_test {

using namespace ktune;
using namespace ktune::templates;

namespace {

/// A config that differs from the default in every tunable.
Config non_default(std::int64_t vec) {
  return Config({{"threads", 64}, {"vec", vec}, {"unroll", 4}, {"blocks_per_sm", 1}});
}

/// Runs `f` on `n` source elements `src` (raw bytes, `src_size` each) placed
/// `offset` elements into their allocation, the destination likewise, with
/// the grid forced to `blocks`; returns the destination's bytes.
std::vector<std::byte> run_raw(const Family& f, const Config& c, std::int64_t n, std::size_t offset, unsigned blocks,
                               const std::vector<std::byte>& src, std::size_t src_size, std::size_t dst_size) {
  const Problem p{"bf16", {{"n", n}}};
  const auto module = tuner::emu::load_module(f.render(c, p));
  std::vector<std::unique_ptr<tuner::emu::GuardedBuffer>> buffers;
  buffers.push_back(std::make_unique<tuner::emu::GuardedBuffer>("x", (n + offset) * src_size));
  buffers.push_back(std::make_unique<tuner::emu::GuardedBuffer>("y", (n + offset) * dst_size));
  for (auto& b : buffers) b->fill(0xff);
  std::memcpy(buffers[0]->data() + offset * src_size, src.data(), src.size());
  const std::vector<std::uint64_t> addresses = {
      reinterpret_cast<std::uint64_t>(buffers[0]->data() + offset * src_size),
      reinterpret_cast<std::uint64_t>(buffers[1]->data() + offset * dst_size)};
  auto launches = f.plan(c, p, addresses, tuner::EmuRunner().device());
  REQUIRE(launches.size() == 1);
  launches[0].grid[0] = blocks;
  test::run_emulated(*module, launches, buffers, 2);
  const auto* y = buffers[1]->data() + offset * dst_size;
  return std::vector<std::byte>(y, y + n * dst_size);
}

template <class T>
std::vector<std::byte> bytes_of(const std::vector<T>& v) {
  const auto* p = reinterpret_cast<const std::byte*>(v.data());
  return std::vector<std::byte>(p, p + v.size() * sizeof(T));
}

}  // namespace

TEST_CASE("cast kernels with non-default configs match the reference exactly on a ragged n", "[cast][emu]") {
  for (const Family* f : std::vector<const Family*>{&cast::to_bf16_family(), &cast::to_f32_family()})
    for (const std::int64_t vec : {2, 8}) {
      // 4099 is a multiple of no vector width: the scalar tail runs.
      DYNAMIC_SECTION(f->name() << " vec " << vec) {
        test::check_emulated_matches_reference(*f, non_default(vec), Problem{"bf16", {{"n", 4099}}}, 1);
      }
    }
}

TEST_CASE("cast kernels: misaligned pointers and several tiles per block give the reference's bits",
          "[cast][emu]") {
  const std::int64_t n = 3001;
  std::mt19937_64 rng(3);
  auto x = random_floats(rng, n, -100, 100);
  for (std::size_t i = 0; i < x.size(); i += 5)  // ties: the tie rule decides
    x[i] = std::bit_cast<float>((std::bit_cast<std::uint32_t>(x[i]) & ~0xffffu) | 0x8000u);
  std::vector<std::uint16_t> narrow(n);
  cast::cast_to_bf16(x.data(), narrow.data(), n);
  std::vector<float> wide(n);
  cast::cast_to_f32(narrow.data(), wide.data(), n);
  Config c = non_default(4);
  c.set("unroll", 2);
  // Offset 0: aligned, vector path; 3 blocks of 512-element tiles grid-stride
  // over 3001 elements. Offset 1: misaligned for vectors, scalar path.
  for (const std::size_t offset : {0, 1}) {
    DYNAMIC_SECTION("offset " << offset) {
      CHECK(run_raw(cast::to_bf16_family(), c, n, offset, 3, bytes_of(x), 4, 2) == bytes_of(narrow));
      CHECK(run_raw(cast::to_f32_family(), c, n, offset, 3, bytes_of(narrow), 2, 4) == bytes_of(wide));
    }
  }
}

}  // namespace templates_cast_family_emu_test
