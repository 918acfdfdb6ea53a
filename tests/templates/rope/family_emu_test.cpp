// RoPE kernels run by the host emulation backend against the CPU reference:
// non-default layouts (idle threads in a block, a short last head group, one
// slot per block), and the paths the runner's workloads never take: the
// rotation in place (y == x), misaligned activations or tables (the scalar
// path), a grid-stride loop over several items per slot, and the backward
// undoing the forward.
#include <catch2/catch.hpp>
#include <cstring>
#include <memory>

#include "templates/render.hpp"
#include "templates/rope/rope.hpp"
#include "tuner/emu/grid.hpp"
#include "tuner/emu_launch.hpp"
#include "tuner/emu/memory.hpp"
#include "tuner/emu/module.hpp"
#include "tuner/run/emu_runner.hpp"

namespace templates_rope_family_emu_test {

using namespace ktune;
using namespace ktune::templates;

namespace {

const std::vector<const Family*> kFamilies = {&rope::forward_family(), &rope::backward_family()};

Problem problem(const char* dtype, std::int64_t head_dim, std::int64_t heads, std::int64_t seq, std::int64_t tokens) {
  return Problem{dtype, {{"head_dim", head_dim}, {"heads", heads}, {"seq", seq}, {"tokens", tokens}}};
}

Config config(std::int64_t threads, std::int64_t vec, std::int64_t heads_per_thread, std::int64_t blocks_per_sm = 0) {
  return Config({{"threads", threads}, {"vec", vec}, {"heads_per_thread", heads_per_thread},
                 {"blocks_per_sm", blocks_per_sm}});
}

/// Where the buffers of one run lie, and the grid it runs on.
struct Placement {
  std::size_t activation_offset = 0;  ///< elements between the allocations' starts and x, y
  std::size_t table_offset = 0;       ///< floats between the allocations' starts and cos, sin
  bool in_place = false;              ///< y is x
  unsigned blocks = 0;                ///< forced grid size; 0 keeps the plan's
};

/// Emulation buffers holding a workload's buffers at `at`'s offsets, outputs poisoned.
struct PlacedBuffers {
  std::vector<std::unique_ptr<tuner::emu::GuardedBuffer>> owned;
  std::vector<std::uint64_t> addresses;
};

PlacedBuffers place(const Workload& w, const Placement& at) {
  PlacedBuffers b;
  for (std::size_t i = 0; i < w.buffers.size(); ++i) {
    const HostBuffer& hb = w.buffers[i];
    const bool table = i == 1 || i == 2;
    const std::size_t offset = (table ? at.table_offset : at.activation_offset) * size_of(hb.dtype);
    auto& g = b.owned.emplace_back(std::make_unique<tuner::emu::GuardedBuffer>(hb.name, offset + hb.bytes.size()));
    g->fill(0xff);
    if (hb.role == Role::kInput) std::memcpy(g->data() + offset, hb.bytes.data(), hb.bytes.size());
    b.addresses.push_back(reinterpret_cast<std::uint64_t>(g->data() + offset));
  }
  if (at.in_place) b.addresses[3] = b.addresses[0];
  return b;
}

/// Runs `f`'s plan for `c` on a fresh workload placed at `at`; returns the
/// output's relative L2 error against the reference.
double run_placed(const Family& f, const Config& c, const Problem& p, const Placement& at) {
  const auto module = tuner::emu::load_module(f.render(c, p));
  const Workload w = f.make_workload(p, 13);
  PlacedBuffers b = place(w, at);
  auto launches = f.plan(c, p, b.addresses, tuner::EmuRunner().device());
  REQUIRE(launches.size() == 1);
  if (at.blocks) launches[0].grid[0] = at.blocks;
  test::run_emulated(*module, launches, b.owned, 2);
  const auto* out = reinterpret_cast<const std::byte*>(b.addresses[3]);
  return relative_l2(w.buffers[3].dtype, std::vector<std::byte>(out, out + w.buffers[3].bytes.size()),
                     w.buffers[3].expected);
}

}  // namespace

TEST_CASE("rope kernels with non-default layouts match the reference on ragged shapes", "[rope][emu]") {
  tuner::EmuRunner runner;
  // 37 tokens: the third sequence of 16 is cut short; 5 heads: the last
  // group of 2 or 4 heads is short.
  const std::vector<std::pair<Problem, Config>> cases = {
      // 10 threads a head: 6 slots in 64 threads, 4 idle.
      {problem("bf16", 80, 5, 16, 37), config(64, 8, 2)},
      // 40 threads a head: 3 slots in 128 threads, 8 idle; a grid cap per SM.
      {problem("f32", 80, 5, 16, 37), config(128, 2, 4, 1)},
      // 64 threads a head: one slot per block.
      {problem("f32", 128, 3, 8, 21), config(64, 2, 1)},
      // 2 threads a head, 8 heads per table load over 12 heads.
      {problem("bf16", 16, 12, 8, 19), config(256, 8, 8)},
      {problem("bf16", 32, 3, 8, 20), config(1024, 4, 4)},
  };
  for (const Family* f : kFamilies) {
    for (const auto& [p, c] : cases) {
      DYNAMIC_SECTION(f->name() << " " << p.key() << " " << c.str()) {
        REQUIRE(c != f->default_config(p));
        std::string why;
        REQUIRE(f->is_valid(c, p, runner.device(), &why));
        tuner::RunOptions options;
        options.seed = 11;
        const auto result = runner.run(*f, c, p, options);
        INFO(result.failure);
        REQUIRE(result.ok);
        REQUIRE(result.errors.size() == 1);
        CHECK(result.errors.begin()->second < tolerance_for(p.dtype));
      }
    }
  }
}

TEST_CASE("rope kernels: in place, misaligned activations or tables, several items per slot", "[rope][emu]") {
  const std::vector<std::pair<const char*, Placement>> placements = {
      {"aligned", {}},
      {"in place", {0, 0, true, 0}},
      {"activations one element off (scalar path)", {1, 0, false, 0}},
      {"tables one float off (scalar path)", {0, 1, false, 0}},
      {"in place, one element off", {1, 0, true, 0}},
      {"two blocks grid-striding", {0, 0, false, 2}},
      {"in place, two blocks grid-striding", {0, 0, true, 2}},
  };
  for (const Family* f : kFamilies)
    for (const char* dtype : {"f32", "bf16"}) {
      // 80 = 10 vectors of 8 or 20 of 4: ragged lanes; 3 heads in groups of 2.
      const Problem p = problem(dtype, 80, 3, 16, 41);
      const Config c = config(64, std::string(dtype) == "bf16" ? 8 : 4, 2);
      for (const auto& [what, at] : placements) {
        DYNAMIC_SECTION(f->name() << " " << dtype << ", " << what) {
          CHECK(run_placed(*f, c, p, at) < tolerance_for(dtype));
        }
      }
    }
}

TEST_CASE("rope backward, in place, undoes the forward in place", "[rope][emu]") {
  const Family& fwd = rope::forward_family();
  const Family& bwd = rope::backward_family();
  const Problem p = problem("f32", 64, 4, 32, 70);
  const Config c = config(128, 4, 2);
  const Workload w = fwd.make_workload(p, 21);
  PlacedBuffers b = place(w, Placement{0, 0, true, 0});
  const auto device = tuner::EmuRunner().device();
  for (const Family* f : {&fwd, &bwd}) {
    const auto module = tuner::emu::load_module(f->render(c, p));
    auto launches = f->plan(c, p, b.addresses, device);
    test::run_emulated(*module, launches, b.owned, 2);
  }
  const auto* x = reinterpret_cast<const std::byte*>(b.addresses[0]);
  const std::vector<std::byte> round_trip(x, x + w.buffers[0].bytes.size());
  CHECK(round_trip != w.buffers[0].bytes);  // rounded twice: close, not equal
  CHECK(relative_l2(DType::kF32, round_trip, w.buffers[0].bytes) < 1e-6);
}

}  // namespace templates_rope_family_emu_test
