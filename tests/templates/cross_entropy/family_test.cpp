// Cross-entropy families, host side: problems, constraints, defaults,
// rendering, workloads and launch plans, counts.
#include "templates/cross_entropy/cross_entropy.hpp"

#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "base/error.hpp"
#include "templates/render.hpp"

namespace templates_cross_entropy_family_test {

using namespace ktune;
using namespace ktune::templates;
using namespace ktune::templates::cross_entropy;

namespace {

const Family& fwd = forward_family();
const Family& bwd = backward_family();
const std::vector<const Family*> kFamilies = {&fwd, &bwd};

/// A config of `f`'s space: the forward's also has `prefetch`.
Config layout(const Family& f, std::int64_t threads, std::int64_t row_threads, std::int64_t vec, std::int64_t unroll,
              std::int64_t prefetch = 0) {
  Config c({{"threads", threads}, {"row_threads", row_threads}, {"vec", vec}, {"unroll", unroll}});
  if (&f == &fwd) c.set("prefetch", prefetch);
  return c;
}

std::string why_invalid(const Family& f, const Config& c, const Problem& p) {
  std::string why;
  CHECK_FALSE(f.is_valid(c, p, DeviceLimits::for_arch("sm_90"), &why));
  return why;
}

/// Element `i` of a buffer's bytes as a float (f32 or bf16).
float at(const HostBuffer& b, const std::vector<std::byte>& bytes, std::size_t i) {
  return static_cast<float>(value_at(b.dtype, bytes, i));
}

std::int32_t target_at(const HostBuffer& b, std::size_t i) {
  std::int32_t t;
  std::memcpy(&t, b.bytes.data() + 4 * i, 4);
  return t;
}

}  // namespace

TEST_CASE("cross_entropy families are registered and reject bad problems with what is accepted",
          "[cross_entropy][family]") {
  CHECK(&find_family("cross_entropy_fwd") == &forward_family());
  CHECK(&find_family("cross_entropy_bwd") == &backward_family());
  for (const Family* f : kFamilies) {
    INFO(f->name());
    CHECK_THROWS_WITH(f->check_problem(Problem{"f16", {{"rows", 4}, {"vocab", 100}}}),
                      Catch::Contains("'f16' is not supported; accepted: f32, bf16"));
    CHECK_THROWS_WITH(f->check_problem(Problem{"f32", {{"rows", 4}, {"vocab", 0}}}),
                      Catch::Contains("'vocab' must be in 1..2^30"));
    CHECK_THROWS_WITH(f->check_problem(Problem{"f32", {{"rows", 4}, {"vocab", kMaxVocab + 1}}}),
                      Catch::Contains("'vocab' must be in 1..2^30"));
    CHECK_NOTHROW(f->check_problem(Problem{"f32", {{"rows", 4}, {"vocab", kMaxVocab}}}));
    CHECK_THROWS_WITH(f->check_problem(Problem{"f32", {{"rows", 0}, {"vocab", 100}}}),
                      Catch::Contains("'rows' (tokens) must be in 1..2^31-1"));
    CHECK_THROWS_WITH(f->check_problem(Problem{"f32", {{"vocab", 100}}}), Catch::Contains("'rows'"));
    CHECK_THROWS_WITH(f->check_problem(Problem{"f32", {{"rows", 4}}}), Catch::Contains("'vocab'"));
    CHECK_THROWS_WITH(f->check_problem(Problem{"f32", {{"rows", 4}, {"vocab", 100}, {"dim", 2}}}),
                      Catch::Contains("unknown dimension 'dim'; accepted: rows, vocab"));
    CHECK_THROWS_AS(f->make_workload(Problem{"f32", {{"rows", 4}, {"vocab", 0}}}, 1), Error);
    CHECK_NOTHROW(f->check_problem(Problem{"bf16", {{"rows", 4096}, {"vocab", 10000}}}));
    for (const auto& p : f->problem_classes()) CHECK_NOTHROW(f->check_problem(p));
    // Each dimension within its bound, the logits past 2^40 elements: refused before anything is sized.
    CHECK_THROWS_WITH(f->check_problem(Problem{"f32", {{"rows", kMaxRows}, {"vocab", kMaxVocab}}}),
                      f->name() + ": the (rows, vocab) logits would hold rows * vocab = 2147483647 * 1073741824 "
                                  "elements = 2305843008139952128, more than 2^40, the most one tensor may (past any "
                                  "device's memory)");
    CHECK_THROWS_AS(f->make_workload(Problem{"f32", {{"rows", kMaxRows}, {"vocab", kMaxVocab}}}, 1), Error);
    CHECK_NOTHROW(f->check_problem(Problem{"f32", {{"rows", 1024}, {"vocab", kMaxVocab}}}));  // 2^40 exactly
  }
}

TEST_CASE("cross_entropy constraints reject configs before compiling, saying why", "[cross_entropy][family]") {
  const auto sm90 = DeviceLimits::for_arch("sm_90");
  const Problem f32{"f32", {{"rows", 64}, {"vocab", 10000}}};
  const Problem bf16{"bf16", {{"rows", 64}, {"vocab", 10000}}};
  const Problem ragged{"f32", {{"rows", 64}, {"vocab", 1001}}};
  for (const Family* f : kFamilies) {
    INFO(f->name());
    CHECK(f->is_valid(layout(*f, 256, 256, 4, 2), f32, sm90));
    CHECK_THAT(why_invalid(*f, layout(*f, 256, 256, 8, 2), f32), Catch::Contains("at most 16 bytes: vec <= 4 for f32"));
    CHECK(f->is_valid(layout(*f, 256, 256, 8, 2), bf16, sm90));
    CHECK_THAT(why_invalid(*f, layout(*f, 64, 128, 4, 1), f32), Catch::Contains("fit in one block"));
    // 1001 logits: 512 threads x 4 would leave most threads without a vector.
    CHECK_THAT(why_invalid(*f, layout(*f, 1024, 1024, 4, 1), ragged), Catch::Contains("no vector of the 1001 logits"));
    CHECK(f->is_valid(layout(*f, 256, 128, 4, 1), ragged, sm90));
    // 256 threads x 4 cover the row in their first vectors: a second vector per step only idles.
    CHECK_THAT(why_invalid(*f, layout(*f, 256, 256, 4, 2), ragged), Catch::Contains("lower unroll"));
    CHECK_THAT(why_invalid(*f, layout(*f, 256, 128, 4, 4), ragged), Catch::Contains("lower unroll"));
    CHECK(f->is_valid(layout(*f, 256, 128, 4, 2), ragged, sm90));
    // The smallest row_threads and unroll 1 are always allowed, however short the row.
    CHECK(f->is_valid(layout(*f, 64, 8, 4, 1), Problem{"f32", {{"rows", 1}, {"vocab", 1}}}, sm90));
    // A device limit: a block of 1024 threads on a device that allows fewer.
    DeviceLimits small = sm90;
    small.max_threads_per_block = 512;
    std::string why;
    CHECK(f->is_valid(layout(*f, 1024, 1024, 4, 1), f32, sm90));
    CHECK_FALSE(f->is_valid(layout(*f, 1024, 1024, 4, 1), f32, small, &why));
    CHECK_THAT(why, Catch::Contains("block limit"));
  }
}

TEST_CASE("cross_entropy defaults are valid for every accepted vocabulary and stream rows of the model's",
          "[cross_entropy][family]") {
  const auto sm80 = DeviceLimits::for_arch("sm_80");
  for (const Family* f : kFamilies)
    for (const char* dtype : {"f32", "bf16"})
      for (std::int64_t vocab : std::vector<std::int64_t>{1, 2, 3, 7, 8, 77, 100, 1001, 4096, 10000, 32000, 50257,
                                                          128256, kMaxVocab})
        for (std::int64_t rows : {1, 3, 45, 4096}) {
          const Problem p{dtype, {{"rows", rows}, {"vocab", vocab}}};
          INFO(f->name() << " " << p.key());
          const Config c = f->default_config(p);
          CHECK_NOTHROW(f->space().check_member(c));
          std::string why;
          CHECK(f->is_valid(c, p, sm80, &why));
          CHECK(why.empty());
          CHECK(c.at("threads") >= 256);
        }
  // The model's vocabulary: 16-byte accesses, a few vectors per thread, one row per block.
  CHECK(forward_family().default_config(Problem{"f32", {{"rows", 4096}, {"vocab", 10000}}}) ==
        layout(fwd, 512, 512, 4, 2));
  CHECK(forward_family().default_config(Problem{"bf16", {{"rows", 512}, {"vocab", 10000}}}) ==
        layout(fwd, 256, 256, 8, 2));
  // A short vocabulary: many rows per block.
  CHECK(backward_family().default_config(Problem{"bf16", {{"rows", 45}, {"vocab", 77}}}).at("row_threads") == 8);
}

TEST_CASE("cross_entropy_fwd candidates: the default with its next step prefetched, with whole rows in fewer "
          "steps, and both",
          "[cross_entropy][family]") {
  const auto sm90 = DeviceLimits::for_arch("sm_90");
  for (const char* dtype : {"bf16", "f32"}) {
    const Problem p{dtype, {{"rows", 4096}, {"vocab", 10000}}};
    INFO(dtype);
    const Config def = fwd.default_config(p);
    CHECK(def.at("prefetch") == 0);
    const auto candidates = fwd.candidates(p);
    const std::vector<std::pair<std::int64_t, std::int64_t>> unroll_prefetch = {{2, 1}, {4, 0}, {4, 1}};
    REQUIRE(candidates.size() == unroll_prefetch.size());
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      Config expected = def;
      expected.set("unroll", unroll_prefetch[i].first);
      expected.set("prefetch", unroll_prefetch[i].second);
      CHECK(candidates[i] == expected);
      CHECK(fwd.is_valid(candidates[i], p, sm90));
    }
  }
}

TEST_CASE("cross_entropy_bwd candidates: whole rows in fewer steps, and a quarter of the threads a row where the "
          "default gives a row more than 256",
          "[cross_entropy][family]") {
  const auto sm90 = DeviceLimits::for_arch("sm_90");
  const Problem model{"bf16", {{"rows", 4096}, {"vocab", 10000}}}, gpt2{"bf16", {{"rows", 1024}, {"vocab", 50257}}};
  const auto with = [](Config c, std::initializer_list<std::pair<const char*, std::int64_t>> values) {
    for (const auto& [name, value] : values) c.set(name, value);
    return c;
  };
  const Config short_rows = bwd.default_config(model);
  CHECK(short_rows.at("row_threads") <= 256);
  CHECK(bwd.candidates(model) == std::vector<Config>{with(short_rows, {{"unroll", 4}})});
  const Config long_rows = bwd.default_config(gpt2);
  CHECK(long_rows.at("row_threads") == 1024);
  const auto candidates = bwd.candidates(gpt2);
  CHECK(candidates == std::vector<Config>{with(long_rows, {{"unroll", 4}}),
                                          with(long_rows, {{"row_threads", 256}, {"threads", 256}}),
                                          with(long_rows, {{"row_threads", 256}, {"threads", 256}, {"unroll", 4}})});
  for (const Config& c : candidates) {
    INFO(c.str());
    CHECK(c != long_rows);
    CHECK(bwd.is_valid(c, gpt2, sm90));
  }
}

TEST_CASE("cross_entropy rendering: tunables are template arguments, the shape is not", "[cross_entropy][family]") {
  const Problem p{"f32", {{"rows", 8}, {"vocab", 10000}}};
  const Config c = layout(fwd, 256, 64, 4, 2);
  const Rendered r = forward_family().render(c, p);
  REQUIRE(r.kernels.size() == 1);
  CHECK(r.kernels[0] == "cross_entropy::cross_entropy_fwd<256, 64, 4, 2, false, float>");
  CHECK(forward_family().render(c, Problem{"f32", {{"rows", 999}, {"vocab", 1001}}}).source == r.source);
  CHECK(fwd.render(layout(fwd, 256, 64, 4, 2, 1), p).kernels[0] ==
        "cross_entropy::cross_entropy_fwd<256, 64, 4, 2, true, float>");
  const Problem short_rows{"bf16", {{"rows", 8}, {"vocab", 77}}};
  CHECK(bwd.render(layout(bwd, 128, 32, 8, 1), short_rows).kernels[0] ==
        "cross_entropy::cross_entropy_bwd<128, 32, 8, 1, kt::bf16>");
  CHECK_THAT(r.source, Catch::Contains("cross_entropy_fwd"));
}

TEST_CASE("cross_entropy workloads: fresh logits per seed whose exponentials overflow without the max, reference "
          "outputs with their tolerances",
          "[cross_entropy][family]") {
  const std::int64_t rows = 30, vocab = 500;
  for (const char* dtype : {"f32", "bf16"}) {
    const Problem p{dtype, {{"rows", rows}, {"vocab", vocab}}};
    INFO(dtype);
    const Workload fw = forward_family().make_workload(p, 3);
    REQUIRE(fw.buffers.size() == 4);
    const char* fwd_names[] = {"logits", "targets", "losses", "lse"};
    for (std::size_t i = 0; i < 4; ++i) CHECK(fw.buffers[i].name == fwd_names[i]);
    const HostBuffer& logits = fw.buffers[0];
    CHECK(logits.dtype == (std::string(dtype) == "bf16" ? DType::kBF16 : DType::kF32));
    CHECK(logits.elements() == static_cast<std::size_t>(rows * vocab));
    CHECK(fw.buffers[1].dtype == DType::kI32);
    for (std::size_t i : {2, 3}) {
      CHECK(fw.buffers[i].role == Role::kOutput);
      CHECK(fw.buffers[i].dtype == DType::kF32);  // fp32 losses and lse for bf16 logits too
      CHECK(fw.buffers[i].tolerance == tolerance_for("f32"));
    }
    CHECK(forward_family().make_workload(p, 4).buffers[0].bytes != logits.bytes);
    CHECK(forward_family().make_workload(p, 3).buffers[0].bytes == logits.bytes);

    // Without the max subtracted, fp32 sums of exp(logit) overflow in some
    // rows and underflow to 0 in others; every third row is confident.
    int overflowing = 0, vanishing = 0;
    for (std::int64_t r = 0; r < rows; ++r) {
      float naive = 0, largest = -1e30f;
      for (std::int64_t c = 0; c < vocab; ++c) {
        const float x = at(logits, logits.bytes, static_cast<std::size_t>(r * vocab + c));
        naive += std::exp(x);
        largest = std::max(largest, x);
      }
      overflowing += std::isinf(naive);
      vanishing += naive == 0;
      const std::int32_t target = target_at(fw.buffers[1], static_cast<std::size_t>(r));
      REQUIRE(target >= 0);
      REQUIRE(target < vocab);
      const float loss = at(fw.buffers[2], fw.buffers[2].expected, static_cast<std::size_t>(r));
      const float lse = at(fw.buffers[3], fw.buffers[3].expected, static_cast<std::size_t>(r));
      CHECK(loss >= 0);
      CHECK(lse >= largest);
      CHECK(lse <= largest + std::log(static_cast<float>(vocab)) + 1e-3f);
      if (r % 3 == 0) CHECK(loss < 1.0f);
    }
    CHECK(overflowing > 0);
    CHECK(vanishing > 0);

    const Workload bw = backward_family().make_workload(p, 3);
    REQUIRE(bw.buffers.size() == 4);
    const char* bwd_names[] = {"logits", "targets", "lse", "dlogits"};
    for (std::size_t i = 0; i < 4; ++i) CHECK(bw.buffers[i].name == bwd_names[i]);
    CHECK(bw.buffers[0].bytes == logits.bytes);  // the same batch as the forward's
    CHECK(bw.buffers[2].role == Role::kInput);
    CHECK(bw.buffers[2].dtype == DType::kF32);
    CHECK(bw.buffers[2].bytes == fw.buffers[3].expected);  // lse as the forward leaves it
    const HostBuffer& dlogits = bw.buffers[3];
    CHECK(dlogits.role == Role::kOutput);
    CHECK(dlogits.dtype == logits.dtype);
    CHECK(dlogits.tolerance == tolerance_for(dtype));
    // Each row of (softmax - onehot) / rows sums to 0; the target's entry is
    // the only negative one.
    for (std::int64_t r = 0; r < rows; ++r) {
      double sum = 0;
      const std::int32_t target = target_at(bw.buffers[1], static_cast<std::size_t>(r));
      for (std::int64_t c = 0; c < vocab; ++c) {
        const float g = at(dlogits, dlogits.expected, static_cast<std::size_t>(r * vocab + c));
        sum += g;
        if (c != target) CHECK(g >= 0);
      }
      CHECK(std::abs(sum) < 1e-2 / rows);
    }
  }
  CHECK(mean_scale(Problem{"f32", {{"rows", 512}, {"vocab", 10}}}) == 1.0f / 512);
}

TEST_CASE("cross_entropy_fwd's losses pass an RMS error of lse's tolerance times lse's RMS: a single confident row's "
          "fp32 loss passes, a loss that far off fails",
          "[cross_entropy][family]") {
  // Row 0 is a confident one: its loss, log(1 + sum of the others' exp(logit - max)), is about 1e-5, while
  // lse - logit[target] rounds relative to |lse| (the row's offset, up to 120).
  for (const char* dtype : {"f32", "bf16"})
    for (const std::int64_t vocab : {2, 9, 1000}) {
      const Problem p{dtype, {{"rows", 1}, {"vocab", vocab}}};
      const Workload w = fwd.make_workload(p, 1);
      const HostBuffer& losses = w.buffers[2];
      const HostBuffer& lse = w.buffers[3];
      const double loss = at(losses, losses.expected, 0), row_lse = at(lse, lse.expected, 0);
      INFO(p.key() << " loss " << loss << " lse " << row_lse);
      REQUIRE(loss < 1e-2);
      CHECK(losses.atol == Approx(tolerance_for("f32") * std::abs(row_lse)).epsilon(1e-6));
      // The loss as fp32 gives it for the sum, log(fl32(1 + (e^loss - 1))), passes; off by twice the atol fails.
      const auto as_got = [&](double value) {
        return make_buffer("losses", Role::kOutput, DType::kF32, std::vector<float>{static_cast<float>(value)}).bytes;
      };
      const auto fp32 = as_got(std::log(static_cast<double>(static_cast<float>(1.0 + std::expm1(loss)))));
      const auto off = as_got(loss + 2 * losses.atol);
      CHECK(within_tolerance(losses, fp32, relative_l2(DType::kF32, fp32, losses.expected)));
      CHECK_FALSE(within_tolerance(losses, off, relative_l2(DType::kF32, off, losses.expected)));
    }
}

TEST_CASE("cross_entropy plans: one row group per block, element-aligned buffers", "[cross_entropy][family]") {
  const auto device = DeviceLimits::for_arch("sm_90");
  const Problem p{"bf16", {{"rows", 301}, {"vocab", 10000}}};
  const std::vector<std::uint64_t> a = {0x1000, 0x2000, 0x3000, 0x4000};
  const auto fplan = forward_family().plan(layout(fwd, 128, 32, 8, 2), p, a, device);
  REQUIRE(fplan.size() == 1);
  CHECK(fplan[0].grid[0] == 76);  // ceil(301 / 4 rows per block)
  CHECK(fplan[0].block[0] == 128);
  CHECK(fplan[0].args.count() == 6);
  const auto bplan = backward_family().plan(layout(bwd, 512, 512, 8, 1), p, a, device);
  REQUIRE(bplan.size() == 1);
  CHECK(bplan[0].grid[0] == 301);
  CHECK(bplan[0].args.count() == 7);

  // Vectors need no alignment (heads go one element at a time), elements do.
  auto shifted = a;
  shifted[0] += 2;
  CHECK_NOTHROW(forward_family().plan(layout(fwd, 128, 32, 8, 2), p, shifted, device));
  shifted[0] += 1;
  CHECK_THROWS_WITH(forward_family().plan(layout(fwd, 128, 32, 8, 2), p, shifted, device),
                    Catch::Contains("buffer 'logits'") && Catch::Contains("2 bytes of its elements"));
  shifted = a;
  shifted[2] += 2;
  CHECK_THROWS_WITH(backward_family().plan(layout(bwd, 128, 32, 8, 2), p, shifted, device),
                    Catch::Contains("buffer 'lse'"));
  CHECK_THROWS_WITH(forward_family().plan(layout(fwd, 128, 32, 8, 2), p, std::vector<std::uint64_t>{0x1000}, device),
                    Catch::Contains("logits, targets, losses, lse"));
  CHECK_THROWS_WITH(backward_family().plan(layout(bwd, 128, 32, 8, 2), p, std::vector<std::uint64_t>{0x1000}, device),
                    Catch::Contains("logits, targets, lse, dlogits"));

  // The backward's scale is its Args' (a step over micro-batches takes 1 / its tokens), never left unset.
  for (const float bad : {0.0f, -1.0f, std::numeric_limits<float>::infinity(), std::nanf("")}) {
    const BackwardArgs args{.logits = 0x1000, .targets = 0x2000, .lse = 0x3000, .dlogits = 0x4000, .scale = bad};
    CHECK_THROWS_WITH(backward_family().plan(layout(bwd, 128, 32, 8, 2), p, args, device),
                      Catch::Contains("must be finite and positive"));
  }
}

TEST_CASE("cross_entropy counts: FLOPs and minimum traffic scale with the problem", "[cross_entropy][family]") {
  const Problem f32{"f32", {{"rows", 100}, {"vocab", 1000}}};
  const Problem bf16{"bf16", {{"rows", 100}, {"vocab", 1000}}};
  CHECK(forward_family().bytes(f32) == 4.0 * 100 * 1000 + 12 * 100);
  CHECK(forward_family().bytes(bf16) == 2.0 * 100 * 1000 + 12 * 100);
  CHECK(backward_family().bytes(bf16) == 2.0 * 2 * 100 * 1000 + 8 * 100);
  CHECK(forward_family().flops(f32) == 4.0 * 100 * 1000);
  CHECK(backward_family().flops(f32) == 3.0 * 100 * 1000);
}

}  // namespace templates_cross_entropy_family_test
