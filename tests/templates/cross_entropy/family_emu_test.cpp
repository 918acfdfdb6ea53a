// Cross-entropy kernels run by the host emulation backend against the CPU
// reference: non-default configs on ragged shapes (every merge path: shuffles
// only, across warps, one row per block; scalar and vector accesses; heads
// and tails), and the paths the runner's workloads never take: the gradient
// in place (dlogits == logits), buffers shifted off vector alignment, and
// targets outside the vocabulary; the family's own check on a single row,
// and a kernel broken on purpose that it still fails.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <tuple>

#include "templates/cross_entropy/cross_entropy.hpp"
#include "templates/emulated_plan.hpp"
#include "templates/render.hpp"
#include "tuner/emu/grid.hpp"
#include "tuner/emu_launch.hpp"
#include "tuner/emu/memory.hpp"
#include "tuner/emu/module.hpp"
#include "tuner/run/emu_runner.hpp"

namespace templates_cross_entropy_family_emu_test {

using namespace ktune;
using namespace ktune::templates;
using namespace ktune::templates::cross_entropy;

namespace {

/// A config of the backward's space; `forward` adds the forward's `prefetch`.
Config layout(std::int64_t threads, std::int64_t row_threads, std::int64_t vec, std::int64_t unroll) {
  return Config({{"threads", threads}, {"row_threads", row_threads}, {"vec", vec}, {"unroll", unroll}});
}
Config forward(Config c, std::int64_t prefetch) {
  c.set("prefetch", prefetch);
  return c;
}

/// Runs `config` emulated against the reference: losses and lse, or dlogits.
void check_matches_reference(const Family& f, const Config& config, const Problem& p) {
  test::check_emulated_matches_reference(f, config, p, &f == &forward_family() ? 2 : 1);
}

/// Runs `f`'s plan for `c` on the buffers of `w` (inputs copied, outputs
/// poisoned), buffer i starting `shift[i]` elements into its allocation, so
/// its rows start at other alignments; with `in_place` the backward's
/// dlogits is its logits. Returns every buffer's contents afterwards
/// (dlogits read from the logits when in place).
std::vector<std::vector<std::byte>> run_plan(const Family& f, const Config& c, const Problem& p, const Workload& w,
                                             const std::vector<std::size_t>& shift, bool in_place) {
  const auto module = tuner::emu::load_module(f.render(c, p));
  std::vector<std::unique_ptr<tuner::emu::GuardedBuffer>> buffers;
  std::vector<std::uint64_t> addresses;
  for (std::size_t i = 0; i < w.buffers.size(); ++i) {
    const HostBuffer& hb = w.buffers[i];
    const std::size_t offset = shift.at(i) * size_of(hb.dtype);
    auto& b = buffers.emplace_back(std::make_unique<tuner::emu::GuardedBuffer>(hb.name, offset + hb.bytes.size()));
    b->fill(0xff);
    if (hb.role == Role::kInput) std::memcpy(b->data() + offset, hb.bytes.data(), hb.bytes.size());
    addresses.push_back(reinterpret_cast<std::uint64_t>(b->data() + offset));
  }
  if (in_place) addresses[3] = addresses[0];
  auto launches = f.plan(c, p, addresses, tuner::EmuRunner().device());
  test::run_emulated(*module, launches, buffers, 2);
  std::vector<std::vector<std::byte>> out;
  for (std::size_t i = 0; i < w.buffers.size(); ++i) {
    const auto* data = reinterpret_cast<const std::byte*>(addresses[i]);
    out.emplace_back(data, data + w.buffers[i].bytes.size());
  }
  return out;
}

float element(const HostBuffer& b, const std::vector<std::byte>& bytes, std::size_t i) {
  return static_cast<float>(value_at(b.dtype, bytes, i));
}

/// Elements [begin, end) of a buffer's bytes, as bytes.
std::vector<std::byte> slice(const HostBuffer& b, const std::vector<std::byte>& bytes, std::size_t begin,
                             std::size_t end) {
  const std::size_t s = size_of(b.dtype);
  return std::vector<std::byte>(bytes.begin() + static_cast<std::ptrdiff_t>(begin * s),
                                bytes.begin() + static_cast<std::ptrdiff_t>(end * s));
}

}  // namespace

TEST_CASE("cross_entropy_fwd: non-default configs on ragged shapes match the reference", "[cross_entropy][emu]") {
  const Family& f = forward_family();
  // 37 rows of 1001 logits start at every alignment: heads and tails of up
  // to VEC - 1 elements; the last block holds fewer rows. With prefetch 1
  // each step's loads are issued a step ahead (31 steps a row in the first).
  SECTION("f32, sub-warp rows (shuffles only), scalar accesses, the next step prefetched") {
    check_matches_reference(f, forward(layout(64, 16, 1, 2), 1), Problem{"f32", {{"rows", 37}, {"vocab", 1001}}});
  }
  SECTION("f32, a warp per row, four vectors per step") {
    check_matches_reference(f, forward(layout(128, 32, 4, 4), 0), Problem{"f32", {{"rows", 37}, {"vocab", 1001}}});
  }
  SECTION("f32, a warp per row, four vectors per step, the next step prefetched") {
    check_matches_reference(f, forward(layout(128, 32, 4, 4), 1), Problem{"f32", {{"rows", 37}, {"vocab", 1001}}});
  }
  SECTION("f32, pairs of logits, rows across two warps, the next step prefetched") {
    check_matches_reference(f, forward(layout(128, 64, 2, 1), 1), Problem{"f32", {{"rows", 23}, {"vocab", 999}}});
  }
  SECTION("bf16, the model's vocabulary, rows across four warps, two rows per block, the next step prefetched") {
    check_matches_reference(f, forward(layout(256, 128, 8, 1), 1), Problem{"bf16", {{"rows", 7}, {"vocab", 10000}}});
  }
  SECTION("bf16, one row per block of 1024 threads") {
    check_matches_reference(f, forward(layout(1024, 1024, 8, 1), 0), Problem{"bf16", {{"rows", 3}, {"vocab", 10000}}});
  }
  SECTION("bf16, a short vocabulary, 32 rows per block, the next step prefetched") {
    check_matches_reference(f, forward(layout(256, 8, 2, 2), 1), Problem{"bf16", {{"rows", 45}, {"vocab", 77}}});
  }
}

TEST_CASE("cross_entropy_fwd: the family's check passes a single row, whose loss is near 0", "[cross_entropy][emu]") {
  // Row 0 is a confident one (loss about 1e-5): a single row is checked on it alone, at lse's scale.
  const Family& f = forward_family();
  tuner::EmuRunner runner;
  for (const char* dtype : {"f32", "bf16"})
    for (const std::int64_t vocab : {2, 9, 1000})
      for (const std::uint64_t seed : {1, 2}) {
        const Problem p{dtype, {{"rows", 1}, {"vocab", vocab}}};
        tuner::RunOptions options;
        options.seed = seed;
        const auto r = runner.run(f, f.default_config(p), p, options);
        INFO(p.key() << " seed " << seed << ": " << r.failure);
        CHECK(r.ok);
      }
}

TEST_CASE("cross_entropy_fwd: a kernel broken on purpose fails the family's check", "[cross_entropy][emu]") {
  // The loss without log(sum): right only where the target's logit leads by far (a confident row, within the
  // atol on its own), wrong by log(vocab) or more on the others.
  const Family& f = forward_family();
  for (const char* dtype : {"f32", "bf16"}) {
    const Problem p{dtype, {{"rows", 3}, {"vocab", 1001}}};
    const Config c = f.default_config(p);
    CHECK(test::emulated_check_passes(f, f.render(c, p), c, p, 3));
    const Rendered no_sum =
        test::broken(f.render(c, p), "(acc.max - target_logit) + log_sum", "(acc.max - target_logit)");
    CHECK_FALSE(test::emulated_check_passes(f, no_sum, c, p, 3));
  }
}

TEST_CASE("cross_entropy_bwd: non-default configs on ragged shapes match the reference", "[cross_entropy][emu]") {
  const Family& f = backward_family();
  SECTION("f32, sub-warp rows, scalar accesses") {
    check_matches_reference(f, layout(64, 16, 1, 2), Problem{"f32", {{"rows", 37}, {"vocab", 1001}}});
  }
  SECTION("f32, a warp per row, four vectors per step") {
    check_matches_reference(f, layout(128, 32, 4, 4), Problem{"f32", {{"rows", 37}, {"vocab", 1001}}});
  }
  SECTION("bf16, the model's vocabulary, two rows per block") {
    check_matches_reference(f, layout(256, 128, 8, 1), Problem{"bf16", {{"rows", 7}, {"vocab", 10000}}});
  }
  SECTION("bf16, a short vocabulary, 32 rows per block") {
    check_matches_reference(f, layout(256, 8, 2, 2), Problem{"bf16", {{"rows", 45}, {"vocab", 77}}});
  }
  SECTION("bf16, GPT-2's vocabulary, the candidates") {
    const Problem gpt2{"bf16", {{"rows", 3}, {"vocab", 50257}}};
    for (const Config& c : f.candidates(gpt2)) check_matches_reference(f, c, gpt2);
  }
}

TEST_CASE("cross_entropy_bwd: in place (dlogits == logits) and shifted buffers match the reference",
          "[cross_entropy][emu]") {
  const Family& f = backward_family();
  for (const char* dtype : {"f32", "bf16"})
    for (const std::int64_t vocab : {1001, 10000}) {
      const Problem p{dtype, {{"rows", 5}, {"vocab", vocab}}};
      const Config c = layout(256, 64, std::string(dtype) == "bf16" ? 8 : 4, 2);
      const Workload w = f.make_workload(p, 21);
      const HostBuffer& expected = w.buffers[3];
      // Shifts in elements of logits, targets, lse, dlogits: a shared shift
      // keeps vectors (with heads); different ones take the scalar path.
      for (const auto& [shift, in_place, what] :
           {std::tuple{std::vector<std::size_t>{0, 0, 0, 0}, true, "in place"},
            std::tuple{std::vector<std::size_t>{3, 0, 0, 0}, true, "in place, logits off vector alignment"},
            std::tuple{std::vector<std::size_t>{3, 0, 0, 3}, false, "both shifted alike"},
            std::tuple{std::vector<std::size_t>{1, 0, 0, 0}, false, "shifted apart (scalar path)"}}) {
        DYNAMIC_SECTION(dtype << " vocab " << vocab << ": " << what) {
          REQUIRE(f.is_valid(c, p, tuner::EmuRunner().device()));
          const auto out = run_plan(f, c, p, w, shift, in_place);
          const double error = relative_l2(expected.dtype, out[3], expected.expected);
          INFO("dlogits error " << error);
          CHECK(error < expected.tolerance);
        }
      }
    }
}

TEST_CASE("cross_entropy_fwd: logits off vector alignment match the reference", "[cross_entropy][emu]") {
  const Family& f = forward_family();
  for (const char* dtype : {"f32", "bf16"})
    for (const std::size_t shift : {1, 2, 3}) {
      const Problem p{dtype, {{"rows", 6}, {"vocab", 10000}}};
      DYNAMIC_SECTION(dtype << " logits shifted by " << shift) {
        const Config c = forward(layout(512, 256, std::string(dtype) == "bf16" ? 8 : 4, 2), shift % 2);
        const Workload w = f.make_workload(p, 22);
        const auto out = run_plan(f, c, p, w, {shift, 0, 0, 0}, false);
        for (std::size_t i : {2, 3}) {
          const double error = relative_l2(DType::kF32, out[i], w.buffers[i].expected);
          INFO(w.buffers[i].name << " error " << error);
          CHECK(error < 1e-5);
        }
      }
    }
}

TEST_CASE("cross_entropy: a target outside the vocabulary reads nothing out of bounds and makes its row NaN",
          "[cross_entropy][emu]") {
  // 10 rows of 1000 fp32 logits end exactly at the guard page after the
  // buffer: reading logits[rows * vocab], which the last row's target would
  // address, faults. Other bad targets point before the row or far away.
  const std::int64_t rows = 10, vocab = 1000;
  const Problem p{"f32", {{"rows", rows}, {"vocab", vocab}}};
  const std::map<std::size_t, std::int32_t> bad = {{0, -1},
                                                   {4, std::numeric_limits<std::int32_t>::min()},
                                                   {6, std::numeric_limits<std::int32_t>::max()},
                                                   {9, static_cast<std::int32_t>(vocab)}};
  auto with_bad_targets = [&](Workload w) {
    for (const auto& [row, target] : bad) std::memcpy(w.buffers[1].bytes.data() + 4 * row, &target, 4);
    return w;
  };
  for (const Config& c : {layout(256, 128, 4, 2), layout(64, 8, 1, 1)}) {
    DYNAMIC_SECTION("forward " << c.str()) {
      const Workload w = with_bad_targets(forward_family().make_workload(p, 5));
      // The second config's 125 steps a row, each loaded a step ahead, stop at the row's end too.
      const auto out = run_plan(forward_family(), forward(c, c.at("unroll") == 1 ? 1 : 0), p, w, {0, 0, 0, 0}, false);
      for (std::size_t r = 0; r < static_cast<std::size_t>(rows); ++r) {
        INFO("row " << r);
        const float loss = element(w.buffers[2], out[2], r);
        if (bad.count(r)) {
          CHECK(std::isnan(loss));
        } else {
          // fp32's absolute floor where a confident row's loss is near 0.
          CHECK(loss == Approx(element(w.buffers[2], w.buffers[2].expected, r)).epsilon(1e-5).margin(1e-6));
        }
        CHECK(element(w.buffers[3], out[3], r) == Approx(element(w.buffers[3], w.buffers[3].expected, r)));
      }
    }
    DYNAMIC_SECTION("backward " << c.str()) {
      const Workload w = with_bad_targets(backward_family().make_workload(p, 5));
      const HostBuffer& d = w.buffers[3];
      for (const bool in_place : {false, true}) {
        INFO((in_place ? "in place" : "apart"));
        const auto out = run_plan(backward_family(), c, p, w, {0, 0, 0, 0}, in_place);
        std::vector<std::byte> got, expected;  // the rows with valid targets, checked together
        for (std::size_t r = 0; r < static_cast<std::size_t>(rows); ++r) {
          INFO("row " << r);
          const std::size_t begin = r * vocab, end = begin + vocab;
          if (bad.count(r)) {
            std::size_t nan = 0;
            for (std::size_t i = begin; i < end; ++i) nan += std::isnan(element(d, out[3], i));
            CHECK(nan == static_cast<std::size_t>(vocab));
          } else {
            const auto g = slice(d, out[3], begin, end), e = slice(d, d.expected, begin, end);
            got.insert(got.end(), g.begin(), g.end());
            expected.insert(expected.end(), e.begin(), e.end());
          }
        }
        CHECK(relative_l2(d.dtype, got, expected) < 1e-5);
      }
    }
  }
}

TEST_CASE("cross_entropy_fwd: a NaN logit makes its row's loss and lse NaN, and no other row's, at a row's head, in "
          "its body and alone in a step",
          "[cross_entropy][emu]") {
  // As PyTorch's: a NaN logit (a bad batch, an overflow upstream) shows in the loss. Row 1 starts off vector
  // alignment (vocab 65), so its column 0 is a head element taken one at a time; row 3's NaNs fill thread 0's
  // first step; at vec 1 and unroll 1 a step is one element, which a max that drops NaN passed over whole.
  const std::int64_t rows = 5, vocab = 65;
  const Problem p{"f32", {{"rows", rows}, {"vocab", vocab}}};
  const std::map<std::size_t, std::vector<std::size_t>> nan_at = {{1, {0}}, {3, {0, 1, 2, 3, 32, 33, 34, 35}},
                                                                  {4, {40}}};
  for (const Config& c : {forward(layout(64, 8, 4, 2), 0), forward(layout(64, 8, 1, 1), 0),
                          forward(layout(64, 32, 4, 1), 1), forward_family().default_config(p)}) {
    DYNAMIC_SECTION(c.str()) {
      Workload w = forward_family().make_workload(p, 9);
      const float nan = std::numeric_limits<float>::quiet_NaN();
      for (const auto& [row, columns] : nan_at)
        for (const std::size_t col : columns) std::memcpy(w.buffers[0].bytes.data() + 4 * (row * vocab + col), &nan, 4);
      const auto out = run_plan(forward_family(), c, p, w, {0, 0, 0, 0}, false);
      for (std::size_t r = 0; r < static_cast<std::size_t>(rows); ++r) {
        INFO("row " << r);
        const float loss = element(w.buffers[2], out[2], r), lse = element(w.buffers[3], out[3], r);
        if (nan_at.count(r)) {
          CHECK(std::isnan(loss));
          CHECK(std::isnan(lse));
        } else {
          CHECK(loss == Approx(element(w.buffers[2], w.buffers[2].expected, r)).epsilon(1e-5).margin(1e-6));
          CHECK(lse == Approx(element(w.buffers[3], w.buffers[3].expected, r)));
        }
      }
    }
  }
}

}  // namespace templates_cross_entropy_family_emu_test
