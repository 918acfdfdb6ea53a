// RoPE kernels run by the host emulation backend against the CPU reference:
// non-default layouts (idle threads in a block, a short last head group, one
// slot per block), and the paths the runner's workloads never take: the
// rotation in place (y == x), misaligned activations or tables (the scalar
// path), a grid-stride loop over several items per slot, the backward
// undoing the forward, and tokens' rows further apart than their heads.
#include <catch2/catch.hpp>
#include <cstring>
#include <memory>

#include "base/error.hpp"
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

TEST_CASE("rope kernels with rows further apart than a token's heads (q and k in a fused projection)",
          "[rope][emu]") {
  const auto device = tuner::EmuRunner().device();
  for (const auto* f : {static_cast<const Family*>(&rope::forward_family()),
                        static_cast<const Family*>(&rope::backward_family())})
    for (const char* dtype : {"f32", "bf16"}) {
      const Problem p = problem(dtype, 32, 6, 8, 19);  // a (19, 3, 2, 32) projection's q and k: 6 heads of 32
      const std::int64_t row = 6 * 32;
      const Config c = config(128, std::string(dtype) == "bf16" ? 8 : 4, 2);
      const Workload w = f->make_workload(p, 5);
      const std::size_t e = size_of(w.buffers[0].dtype);
      // 96 elements more a row: v's heads, which must come back as they went; 97 takes the scalar path.
      for (const std::int64_t stride : {row + 96, row + 97})
        for (const bool in_place : {false, true}) {
          DYNAMIC_SECTION(f->name() << " " << dtype << ", row stride " << stride << (in_place ? ", in place" : "")) {
            const std::size_t bytes = static_cast<std::size_t>(19 * stride) * e;
            std::vector<std::unique_ptr<tuner::emu::GuardedBuffer>> owned;
            for (const char* name : {"x", "cos", "sin", "y"}) {
              const bool table = name[0] == 'c' || name[0] == 's';
              const std::size_t n = table ? w.buffers[name[0] == 'c' ? 1 : 2].bytes.size() : bytes;
              owned.push_back(std::make_unique<tuner::emu::GuardedBuffer>(name, n));
              owned.back()->fill(0x5a);  // the gaps' sentinel, and y's poison
            }
            for (std::size_t t = 0; t < 19; ++t)
              std::memcpy(owned[0]->data() + t * stride * e, w.buffers[0].bytes.data() + t * row * e, row * e);
            for (int i : {1, 2}) std::memcpy(owned[i]->data(), w.buffers[i].bytes.data(), w.buffers[i].bytes.size());
            const std::vector<std::byte> before(owned[0]->data(), owned[0]->data() + bytes);
            auto* out = in_place ? owned[0].get() : owned[3].get();
            const auto address = [&](int i) { return reinterpret_cast<std::uint64_t>(owned[i]->data()); };
            const std::uint64_t x = address(0), y = in_place ? x : address(3);
            auto launches = f == &rope::forward_family()
                                ? rope::forward_family().plan(c, p, {.x = x, .cos = address(1), .sin = address(2),
                                                                     .y = y, .row_stride = stride}, device)
                                : rope::backward_family().plan(c, p, {.dy = x, .cos = address(1), .sin = address(2),
                                                                      .dx = y, .row_stride = stride}, device);
            const auto module = tuner::emu::load_module(f->render(c, p));
            test::run_emulated(*module, launches, owned, 2);
            std::vector<std::byte> rows;
            for (std::size_t t = 0; t < 19; ++t) {
              const std::byte* r = out->data() + t * stride * e;
              rows.insert(rows.end(), r, r + row * e);
              // Past each token's heads: untouched (the sentinel, or in place x's own gap).
              for (std::size_t i = row * e; i < static_cast<std::size_t>(stride) * e; ++i)
                REQUIRE(r[i] == (in_place ? before[t * stride * e + i] : std::byte{0x5a}));
            }
            CHECK(relative_l2(w.buffers[3].dtype, rows, w.buffers[3].expected) < tolerance_for(dtype));
          }
        }
    }
  // A stride shorter than a token's heads would overlap its rows: refused.
  CHECK_THROWS_AS(rope::forward_family().plan(config(128, 4, 2), problem("f32", 32, 6, 8, 19),
                                              {.x = 256, .cos = 256, .sin = 256, .y = 256, .row_stride = 100},
                                              device),
                  Error);
}

}  // namespace templates_rope_family_emu_test
