// Token embedding families, host side: problems, constraints, the backward's
// two variants (plans, workspace), rendering, workloads, counts.
#include "templates/embedding/embedding.hpp"

#include <catch2/catch.hpp>
#include <cstring>

#include "base/error.hpp"
#include "templates/common/family_helpers.hpp"
#include "templates/render.hpp"

namespace templates_embedding_family_test {

using namespace ktune;
using namespace ktune::templates;
using namespace ktune::templates::embedding;

namespace {

const std::vector<const Family*> kFamilies = {&forward_family(), &backward_family()};
const auto kDevice = DeviceLimits::for_arch("sm_90");

Config layout(std::int64_t threads, std::int64_t row_threads, std::int64_t vec) {
  return Config({{"threads", threads}, {"row_threads", row_threads}, {"vec", vec}});
}
Config bwd(std::int64_t threads, std::int64_t row_threads, std::int64_t vec, std::int64_t deterministic,
           std::int64_t cols = 1) {
  Config c = layout(threads, row_threads, vec);
  c.set("deterministic", deterministic);
  c.set("cols", cols);
  return c;
}
Problem problem(const char* dtype, std::int64_t rows, std::int64_t dim, std::int64_t vocab) {
  return Problem{dtype, {{"rows", rows}, {"dim", dim}, {"vocab", vocab}}};
}

}  // namespace

TEST_CASE("embedding families are registered and reject bad problems with what is accepted", "[embedding][family]") {
  CHECK(&find_family("embedding_fwd") == &forward_family());
  CHECK(&find_family("embedding_bwd") == &backward_family());
  for (const Family* f : kFamilies) {
    INFO(f->name());
    CHECK_NOTHROW(f->check_problem(problem("bf16", 4096, 1600, 10000)));
    CHECK_THROWS_WITH(f->check_problem(problem("f16", 4, 64, 10)), Catch::Contains("accepted: f32, bf16"));
    CHECK_THROWS_WITH(f->check_problem(problem("f32", 4, 0, 10)), Catch::Contains("'dim' must be in 1..2^20"));
    CHECK_THROWS_WITH(f->check_problem(problem("f32", 0, 64, 10)), Catch::Contains("'rows' (tokens) must be"));
    CHECK_THROWS_WITH(f->check_problem(problem("f32", 4, 64, 0)), Catch::Contains("'vocab' must be given, in 1.."));
    CHECK_THROWS_WITH(f->check_problem(Problem{"f32", {{"rows", 4}, {"dim", 64}}}), Catch::Contains("'vocab'"));
    CHECK_THROWS_WITH(f->check_problem(Problem{"f32", {{"rows", 4}, {"dim", 64}, {"vocab", 9}, {"n", 1}}}),
                      Catch::Contains("unknown dimension 'n'; accepted: rows, dim, vocab"));
    CHECK_THROWS_AS(f->make_workload(problem("f32", 4, 64, -1), 1), Error);
    // The table and the rows each within 2^40 elements, each dimension within its bound or not.
    CHECK_THROWS_WITH(f->check_problem(problem("f32", 4, 1 << 20, (1LL << 31) - 2)),
                      f->name() + ": the (vocab, dim) table would hold vocab * dim = 2147483646 * 1048576 elements = "
                                  "2251799811588096, more than 2^40, the most one tensor may (past any device's "
                                  "memory)");
    CHECK_THROWS_WITH(f->check_problem(problem("f32", (1LL << 31) - 1, 1 << 20, 10)),
                      Catch::Contains("the (rows, dim) elements would hold rows * dim = 2147483647 * 1048576"));
    CHECK_NOTHROW(f->check_problem(problem("f32", 1 << 20, 1 << 20, 1 << 20)));  // 2^40 exactly
  }
}

TEST_CASE("embedding constraints and defaults", "[embedding][family]") {
  const Problem p = problem("f32", 64, 100, 50);
  std::string why;
  CHECK_FALSE(forward_family().is_valid(layout(256, 32, 8), p, kDevice, &why));
  CHECK_THAT(why, Catch::Contains("at most 16 bytes"));
  CHECK_FALSE(forward_family().is_valid(layout(256, 8, 8), problem("bf16", 64, 100, 50), kDevice, &why));
  CHECK_THAT(why, Catch::Contains("dim 100 is not a multiple of vec 8"));
  CHECK_FALSE(backward_family().is_valid(bwd(256, 256, 4, 1), p, kDevice, &why));
  CHECK_THAT(why, Catch::Contains("would get no vector"));
  for (const Family* f : kFamilies)
    for (const auto& q : {p, problem("bf16", 45, 77, 1000), problem("bf16", 4096, 768, 10000)}) {
      INFO(f->name() << " " << q.key());
      const Config c = f->default_config(q);
      CHECK(f->is_valid(c, q, DeviceLimits::for_arch("sm_80")));
    }
  CHECK_FALSE(backward_family().is_valid(bwd(256, 16, 4, 2), p, kDevice, &why));
  CHECK_THAT(why, Catch::Contains("row_threads must be 32, not 16"));
  CHECK_FALSE(backward_family().is_valid(bwd(256, 16, 4, 3), p, kDevice, &why));
  CHECK_THAT(why, Catch::Contains("deterministic 3 (the scan) gives each d_table row one warp"));
  // Reproducible by default: the scan (one launch) where a warp per row fits, else the sort.
  CHECK(backward_family().default_config(p).at("deterministic") == 2);
  CHECK(backward_family().default_config(problem("bf16", 4096, 768, 10000)).at("deterministic") == 2);
  const Config short_rows = backward_family().default_config(problem("f32", 300, 36, 7));
  CHECK(short_rows.at("row_threads") != 32);
  CHECK(short_rows.at("deterministic") == 1);
  CHECK(forward_family().default_config(problem("bf16", 9, 768, 50)).at("vec") == 8);
}

TEST_CASE("embedding_bwd candidates: the scan default with its rows zeroed before the walk, in wider blocks, and "
          "summing more columns a pass",
          "[embedding][family]") {
  const Problem xl = problem("bf16", 4096, 1600, 10000);
  const Config def = backward_family().default_config(xl);
  REQUIRE(def.at("deterministic") == 2);
  REQUIRE(def.at("threads") == 256);
  const auto candidates = backward_family().candidates(xl);
  REQUIRE(candidates.size() == 6);
  CHECK(def.at("cols") == 1);
  CHECK(candidates[0] == with(def, {{"deterministic", 3}}));
  CHECK(candidates[1] == with(def, {{"deterministic", 3}, {"threads", 1024}}));
  CHECK(candidates[4] == with(def, {{"deterministic", 3}, {"cols", 2}}));
  CHECK(candidates[5] == with(def, {{"deterministic", 3}, {"cols", 4}}));
  for (const Config& c : candidates) {
    INFO(c.str());
    CHECK(c.at("deterministic") >= 2);  // a scan: one launch, reproducible
    CHECK(backward_family().is_valid(c, xl, DeviceLimits::for_arch("sm_90")));
    CHECK(backward_family().is_valid(c, xl, DeviceLimits::for_arch("sm_80")));
  }
  // A sorting default has no scan to change.
  CHECK(backward_family().candidates(problem("f32", 300, 36, 7)).empty());
}

TEST_CASE("embedding rendering names each variant's kernels", "[embedding][family]") {
  const Problem p = problem("bf16", 67, 768, 97);
  CHECK(forward_family().render(layout(128, 32, 8), p).kernels ==
        std::vector<std::string>{"embedding::embedding_fwd<128, 32, 8, kt::bf16>"});
  CHECK(backward_family().render(bwd(128, 32, 8, 1), p).kernels ==
        std::vector<std::string>{"embedding::embedding_index<128>",
                                 "embedding::embedding_rows<128, 32, 8, 1, kt::bf16>"});
  CHECK(backward_family().render(bwd(128, 32, 8, 2, 4), p).kernels ==
        std::vector<std::string>{"embedding::embedding_scan<128, 32, 8, false, 4, kt::bf16>"});
  CHECK(backward_family().render(bwd(128, 32, 8, 3, 2), p).kernels ==
        std::vector<std::string>{"embedding::embedding_scan<128, 32, 8, true, 2, kt::bf16>"});
  CHECK_FALSE(backward_family().is_valid(bwd(256, 16, 4, 0, 2), p, DeviceLimits::for_arch("sm_90")));
  // The scan's 64 registers a thread at 1024 threads do not hold four columns of 16-byte vectors (sm_80 spills).
  CHECK_FALSE(backward_family().is_valid(bwd(1024, 32, 8, 3, 4), p, DeviceLimits::for_arch("sm_80")));
  CHECK(backward_family().is_valid(bwd(1024, 32, 8, 3, 2), p, DeviceLimits::for_arch("sm_80")));
  CHECK(backward_family().is_valid(bwd(512, 32, 8, 3, 4), p, DeviceLimits::for_arch("sm_80")));
  CHECK(backward_family().render(bwd(256, 16, 4, 0), problem("f32", 4, 100, 9)).kernels ==
        std::vector<std::string>{"embedding::embedding_zero<256>",
                                 "embedding::embedding_scatter<256, 16, 4, float>"});
}

TEST_CASE("embedding workloads: repeated ids, exact gather, fp32 d_table, scratch for the sorted variant",
          "[embedding][family]") {
  const Problem p = problem("bf16", 300, 36, 7);
  const Workload f = forward_family().make_workload(p, 3);
  REQUIRE(f.buffers.size() == 3);
  CHECK(f.buffers[0].name == "tokens");
  CHECK(f.buffers[0].dtype == DType::kI32);
  CHECK(f.buffers[1].dtype == DType::kBF16);
  CHECK(f.buffers[2].name == "out");
  CHECK(f.buffers[2].tolerance == 0.0);
  std::vector<std::int32_t> tokens(300);
  std::memcpy(tokens.data(), f.buffers[0].bytes.data(), 300 * 4);
  for (int t = 0; t < 300; ++t) {
    REQUIRE((tokens[t] >= 0 && tokens[t] < 7));
    for (int c = 0; c < 36; ++c)
      REQUIRE(value_at(DType::kBF16, f.buffers[2].expected, t * 36 + c) ==
              value_at(DType::kBF16, f.buffers[1].bytes, tokens[t] * 36 + c));
  }
  const Workload b = backward_family().make_workload(p, 3);
  REQUIRE(b.buffers.size() == 4);
  const char* names[] = {"tokens", "d_out", "d_table", "scratch"};
  for (std::size_t i = 0; i < 4; ++i) CHECK(b.buffers[i].name == names[i]);
  CHECK(b.buffers[1].dtype == DType::kBF16);
  CHECK(b.buffers[2].dtype == DType::kF32);  // the master weights' gradient
  CHECK(b.buffers[2].elements() == 7 * 36);
  CHECK(b.buffers[3].role == Role::kScratch);
  CHECK(static_cast<std::int64_t>(b.buffers[3].elements()) == scratch_ints(p));
  // Column 0 of d_table: the sum of d_out's column 0 over each id's tokens.
  for (int v = 0; v < 7; ++v) {
    double sum = 0;
    for (int t = 0; t < 300; ++t)
      if (tokens[t] == v) sum += value_at(DType::kBF16, b.buffers[1].bytes, t * 36);
    CHECK(value_at(DType::kF32, b.buffers[2].expected, v * 36) == Approx(sum).margin(1e-5));
  }
}

TEST_CASE("embedding workloads draw ids by Zipf's law, as text has them: the commonest ids first, each id's share "
          "falling as 1 / rank, every id in the vocabulary",
          "[embedding][family]") {
  // GPT-2's vocabulary, an xl batch of 4 x 1024 tokens (twice over, for the counts' spread).
  const std::int64_t vocab = 50257, rows = 8192;
  for (const Family* f : kFamilies) {
    const Workload w = f->make_workload(problem("bf16", rows, 8, vocab), 11);
    std::vector<std::int32_t> tokens(rows);
    std::memcpy(tokens.data(), w.buffers[0].bytes.data(), rows * 4);
    std::vector<std::int64_t> count(vocab);
    for (const std::int32_t t : tokens) {
      REQUIRE((t >= 0 && t < vocab));
      ++count[t];
    }
    // ln(2) / ln(50258) = 6.4 % of the tokens are id 0 (525 of 8192, sd 22); ids 1 and 2: 3.7 %, 2.7 %; the ten
    // commonest 22 %; ids past 1000 (the tail, where a uniform draw puts 98 % of them) 36 %.
    CHECK(count[0] > 440);
    CHECK(count[0] < 610);
    CHECK(count[1] > count[2]);
    CHECK(count[2] > count[9]);
    std::int64_t top10 = 0, tail = 0;
    for (int v = 0; v < 10; ++v) top10 += count[v];
    for (std::int64_t v = 1000; v < vocab; ++v) tail += count[v];
    CHECK(top10 > rows / 5);
    CHECK(top10 < rows / 4);
    CHECK(tail > rows * 33 / 100);
    CHECK(tail < rows * 40 / 100);
  }
}

TEST_CASE("embedding_bwd plans: index then rows (sorted), clear then scatter (atomic)", "[embedding][family]") {
  const Problem p = problem("f32", 301, 100, 50);
  const auto& f = backward_family();
  const BackwardArgs a{.tokens = 0x1000, .d_out = 0x10000, .d_table = 0x40000, .workspace = 0x80000};
  const auto sorted = f.plan(bwd(128, 32, 4, 1), p, a, kDevice);
  REQUIRE(sorted.size() == 2);
  CHECK(sorted[0].grid[0] == 1);   // the sort is one block
  CHECK(sorted[1].grid[0] == 13);  // ceil(50 vocabulary rows / 4 per block)
  CHECK(f.workspace_bytes(bwd(128, 32, 4, 1), p) == (2 * 50 + 1 + 301) * 4);
  const auto atomic = f.plan(bwd(128, 32, 4, 0), p, a, kDevice);
  REQUIRE(atomic.size() == 2);
  CHECK(atomic[0].args.count() == 2);  // d_table, its elements
  CHECK(atomic[1].grid[0] == 76);      // ceil(301 tokens / 4 per block)
  CHECK(f.workspace_bytes(bwd(128, 32, 4, 0), p) == 0);
  BackwardArgs none = a;
  none.workspace = 0;
  CHECK_NOTHROW(f.plan(bwd(128, 32, 4, 0), p, none, kDevice));
  CHECK_THROWS_WITH(f.plan(bwd(128, 32, 4, 1), p, none, kDevice),
                    Catch::Contains("no workspace given") && Catch::Contains("1608 bytes"));
  BackwardArgs odd = a;
  odd.tokens = 0x1002;
  CHECK_THROWS_WITH(f.plan(bwd(128, 32, 4, 1), p, odd, kDevice), Catch::Contains("buffer 'tokens'"));
  CHECK_THROWS_WITH(forward_family().plan(layout(128, 32, 4), p,
                                          ForwardArgs{.tokens = 0x1000, .table = 0x2008, .out = 0x4000}, kDevice),
                    Catch::Contains("buffer 'table' at 0x2008 is not aligned to the 16 bytes"));
}

TEST_CASE("embedding counts", "[embedding][family]") {
  const Problem p = problem("bf16", 100, 64, 1000);
  CHECK(forward_family().bytes(p) == 4.0 * 100 + 2.0 * 2 * 100 * 64);
  CHECK(backward_family().bytes(p) == 4.0 * 100 + 2.0 * 100 * 64 + 4.0 * 1000 * 64);
  CHECK(forward_family().flops(p) == 0.0);
  CHECK(backward_family().flops(p) == 100.0 * 64);
}

}  // namespace templates_embedding_family_test
