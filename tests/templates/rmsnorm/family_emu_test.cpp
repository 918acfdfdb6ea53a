// RMSNorm kernels run by the host emulation backend against the CPU
// reference: non-default configs on shapes whose last block holds fewer rows
// and whose rows end inside a thread's last vector, each reduction path
// (shuffles only, across warps, one row per block), the backward's blocks
// taking several row groups, and dw repeating bit for bit.
#include <catch2/catch.hpp>
#include <cstring>
#include <memory>

#include "templates/render.hpp"
#include "templates/rmsnorm/rmsnorm.hpp"
#include "tuner/emu/grid.hpp"
#include "tuner/emu/memory.hpp"
#include "tuner/emu/module.hpp"
#include "tuner/run/emu_runner.hpp"
#include "tuner/emu_launch.hpp"

namespace templates_rmsnorm_family_emu_test {

using namespace ktune;
using namespace ktune::templates;
using namespace ktune::templates::rmsnorm;

namespace {

Config layout(std::int64_t threads, std::int64_t row_threads, std::int64_t vec) {
  return Config({{"threads", threads}, {"row_threads", row_threads}, {"vec", vec}});
}
Config with_blocks(Config c, std::int64_t blocks, std::int64_t prefetch = 0) {
  c.set("blocks", blocks);
  c.set("prefetch", prefetch);
  return c;
}

/// Runs `config` emulated against the reference: y and rstd, or dx and dw.
void check_matches_reference(const Family& f, const Config& config, const Problem& p) {
  test::check_emulated_matches_reference(f, config, p, 2);
}

/// Runs the backward's plan on its workload with `workers` OS threads and
/// returns dx and dw as bytes.
std::pair<std::vector<std::byte>, std::vector<std::byte>> run_backward(const Config& c, const Problem& p,
                                                                       unsigned workers) {
  const Family& f = backward_family();
  const auto module = tuner::emu::load_module(f.render(c, p));
  const Workload w = f.make_workload(p, 5);
  std::vector<std::unique_ptr<tuner::emu::GuardedBuffer>> buffers;
  std::vector<std::uint64_t> addresses;
  for (const auto& hb : w.buffers) {
    auto& b = buffers.emplace_back(std::make_unique<tuner::emu::GuardedBuffer>(hb.name, hb.bytes.size()));
    b->fill(0xff);
    if (hb.role == Role::kInput) std::memcpy(b->data(), hb.bytes.data(), hb.bytes.size());
    addresses.push_back(reinterpret_cast<std::uint64_t>(b->data()));
  }
  auto launches = f.plan(c, p, addresses, tuner::EmuRunner().device());
  test::run_emulated(*module, launches, buffers, workers);
  auto bytes = [&](std::size_t i) {
    return std::vector<std::byte>(buffers[i]->data(), buffers[i]->data() + buffers[i]->size());
  };
  const double dx_error = relative_l2(w.buffers[4].dtype, bytes(4), w.buffers[4].expected);
  const double dw_error = relative_l2(DType::kF32, bytes(5), w.buffers[5].expected);
  CHECK(dx_error < w.buffers[4].tolerance);
  CHECK(dw_error < w.buffers[5].tolerance);
  return {bytes(4), bytes(5)};
}

}  // namespace

TEST_CASE("rmsnorm_fwd: non-default configs on ragged shapes match the reference", "[rmsnorm][emu]") {
  const Family& f = forward_family();
  // 37 rows: the last block holds 1 row of 4 (or of 2); 1000 columns end
  // inside the last item of the row's threads.
  SECTION("f32, a warp per row, shuffles only") {
    check_matches_reference(f, layout(128, 32, 4), Problem{"f32", {{"rows", 37}, {"dim", 1000}}});
  }
  SECTION("f32, sub-warp rows, scalar accesses") {
    check_matches_reference(f, layout(64, 16, 2), Problem{"f32", {{"rows", 37}, {"dim", 250}}});
  }
  SECTION("bf16, rows across two warps") {
    check_matches_reference(f, layout(128, 64, 8), Problem{"bf16", {{"rows", 37}, {"dim", 1000}}});
  }
  SECTION("bf16, one row per block") {
    check_matches_reference(f, layout(256, 256, 4), Problem{"bf16", {{"rows", 5}, {"dim", 1000}}});
  }
}

TEST_CASE("rmsnorm_bwd: non-default configs on ragged shapes match the reference", "[rmsnorm][emu]") {
  const Family& f = backward_family();
  // 301 rows in groups of 4 (or 2): 76 (or 151) groups over 64 blocks, so
  // blocks take one to three groups and the last group is ragged.
  SECTION("f32, a warp per row") {
    check_matches_reference(f, with_blocks(layout(128, 32, 4), 64), Problem{"f32", {{"rows", 301}, {"dim", 1000}}});
  }
  SECTION("f32, sub-warp rows, scalar accesses") {
    check_matches_reference(f, with_blocks(layout(64, 16, 1), 64), Problem{"f32", {{"rows", 67}, {"dim", 250}}});
  }
  SECTION("bf16, rows across two warps") {
    check_matches_reference(f, with_blocks(layout(128, 64, 8), 64), Problem{"bf16", {{"rows", 301}, {"dim", 1000}}});
  }
  SECTION("bf16, one row per block") {
    check_matches_reference(f, with_blocks(layout(256, 256, 4), 64), Problem{"bf16", {{"rows", 70}, {"dim", 1000}}});
  }
  SECTION("the next group's rows loaded ahead: f32, a warp per row; bf16, rows across two warps") {
    check_matches_reference(f, with_blocks(layout(128, 32, 4), 64, 1), Problem{"f32", {{"rows", 301}, {"dim", 1000}}});
    check_matches_reference(f, with_blocks(layout(128, 64, 8), 64, 1), Problem{"bf16", {{"rows", 301}, {"dim", 1000}}});
  }
}

TEST_CASE("rmsnorm_bwd: dx and dw repeat bit for bit whatever the block schedule", "[rmsnorm][emu]") {
  const Problem p{"f32", {{"rows", 301}, {"dim", 1000}}};
  for (const std::int64_t prefetch : {0, 1}) {
    const Config c = with_blocks(layout(128, 32, 4), 64, prefetch);
    const auto one = run_backward(c, p, 1);
    const auto two = run_backward(c, p, 2);
    CHECK(one.first == two.first);
    CHECK(one.second == two.second);
  }
}

}  // namespace templates_rmsnorm_family_emu_test
