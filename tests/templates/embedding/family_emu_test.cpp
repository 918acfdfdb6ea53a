// Token embedding kernels run by the host emulation backend against the CPU
// reference: non-default configs of the backward variants on ragged shapes,
// the sorted and scan variants repeating bit for bit, and token ids outside the
// vocabulary (NaN rows forward, left out backward, and never an access
// outside the buffers: the emulation's guard pages would stop the run).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>

#include "templates/embedding/embedding.hpp"
#include "templates/render.hpp"
#include "tuner/emu/memory.hpp"
#include "tuner/emu/module.hpp"
#include "tuner/emu_launch.hpp"
#include "tuner/run/emu_runner.hpp"

namespace templates_embedding_family_emu_test {

using namespace ktune;
using namespace ktune::templates;
using namespace ktune::templates::embedding;

namespace {

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

/// Buffers made for one raw run, with their addresses.
struct Buffers {
  std::vector<std::unique_ptr<tuner::emu::GuardedBuffer>> list;
  std::vector<std::uint64_t> addresses;
  /// A buffer holding `values`, or of their size poisoned (NaN bytes) when `output`.
  template <class T>
  void add(const std::vector<T>& values, bool output = false) {
    auto& b = list.emplace_back(std::make_unique<tuner::emu::GuardedBuffer>("buffer", values.size() * sizeof(T)));
    b->fill(0xff);
    if (!output) std::memcpy(b->data(), values.data(), values.size() * sizeof(T));
    addresses.push_back(reinterpret_cast<std::uint64_t>(b->data()));
  }
  template <class T>
  std::vector<T> get(std::size_t i) const {
    std::vector<T> v(list[i]->size() / sizeof(T));
    std::memcpy(v.data(), list[i]->data(), list[i]->size());
    return v;
  }
};

/// Runs `f`'s plan for `c` on `buffers` (the workload's order) with `workers` OS threads.
void run(const Family& f, const Config& c, const Problem& p, const Buffers& buffers, unsigned workers) {
  const auto module = tuner::emu::load_module(f.render(c, p));
  auto launches = f.plan(c, p, buffers.addresses, tuner::EmuRunner().device());
  test::run_emulated(*module, launches, buffers.list, workers);
}

/// Tokens with ids outside [0, vocab) at a few positions: -1, vocab, a large one.
std::vector<std::int32_t> tokens_with_bad_ids(std::int64_t rows, std::int64_t vocab) {
  std::mt19937_64 rng(5);
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(rows));
  for (auto& t : tokens) t = static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(vocab));
  tokens[0] = -1;
  tokens[7] = static_cast<std::int32_t>(vocab);
  tokens[static_cast<std::size_t>(rows - 1)] = 1 << 30;
  return tokens;
}
bool is_bad(std::int32_t id, std::int64_t vocab) { return id < 0 || id >= vocab; }

}  // namespace

TEST_CASE("embedding kernels: non-default configs on ragged shapes match the reference", "[embedding][emu]") {
  SECTION("forward, f32, scalar accesses") {
    test::check_emulated_matches_reference(forward_family(), layout(64, 16, 1), problem("f32", 37, 100, 50), 1);
  }
  SECTION("forward, bf16, 16-byte accesses, rows of two steps") {
    test::check_emulated_matches_reference(forward_family(), layout(128, 64, 8), problem("bf16", 67, 768, 97), 1);
  }
  for (const std::int64_t deterministic : {0, 1}) {
    DYNAMIC_SECTION("backward, deterministic " << deterministic << ", f32, 7 ids over 300 tokens") {
      // Sorting in chunks of 64 tokens: ids repeat within and across chunks.
      test::check_emulated_matches_reference(backward_family(), bwd(64, 8, 2, deterministic),
                                             problem("f32", 300, 36, 7), 1);
    }
    DYNAMIC_SECTION("backward, deterministic " << deterministic << ", bf16 d_out, vocabulary rows without tokens") {
      test::check_emulated_matches_reference(backward_family(), bwd(128, 16, 4, deterministic),
                                             problem("bf16", 45, 100, 1000), 1);
    }
  }
  // 2: the scan; 3: the scan with its rows zeroed before the walk.
  for (const std::int64_t scan : {2, 3}) {
    DYNAMIC_SECTION("backward, scan " << scan << ", f32, 7 ids over 300 tokens") {
      // Tiles of 64 tokens, the last one short; about 43 tokens an id: each
      // row is summed in two batches or more; the last block's second warp
      // has no row.
      test::check_emulated_matches_reference(backward_family(), bwd(64, 32, 2, scan), problem("f32", 300, 36, 7), 1);
    }
    DYNAMIC_SECTION("backward, scan " << scan << ", bf16 d_out, vocabulary rows without tokens") {
      test::check_emulated_matches_reference(backward_family(), bwd(128, 32, 4, scan), problem("bf16", 45, 100, 1000),
                                             1);
    }
  }
}

TEST_CASE("embedding_bwd sorted and scan: d_table repeats bit for bit whatever the block schedule, and is the "
          "same from both",
          "[embedding][emu]") {
  const Problem p = problem("f32", 1000, 64, 13);
  const Workload w = backward_family().make_workload(p, 4);
  std::vector<std::vector<float>> results;
  for (const Config& c : {bwd(128, 16, 4, 1), bwd(128, 32, 2, 2), bwd(128, 32, 2, 3), bwd(1024, 32, 2, 3)})
    for (const unsigned workers : {1u, 2u, 2u}) {
      Buffers b;
      for (const auto& hb : w.buffers) b.add(hb.bytes, hb.role != Role::kInput);
      run(backward_family(), c, p, b, workers);
      results.push_back(b.get<float>(2));
      CHECK(relative_l2(DType::kF32, b.get<std::byte>(2), w.buffers[2].expected) < 1e-5);
    }
  for (std::size_t i = 1; i < results.size(); ++i) {
    INFO("run " << i);
    CHECK(std::memcmp(results[0].data(), results[i].data(), results[0].size() * 4) == 0);
  }
}

TEST_CASE("embedding_bwd sorted and scan: two or four columns a pass give each column's sums bit for bit, in rows "
          "whose columns do not fill the last pass",
          "[embedding][emu]") {
  // dim 200 at vec 2: 100 vectors a row, so the scan's lanes take 4, 3 or 2 columns at cols 4, 2 and 4 a pass
  // at the sort's 16 threads a row.
  for (const char* dtype : {"f32", "bf16"}) {
    const Problem p = problem(dtype, 777, 200, 29);
    const Workload w = backward_family().make_workload(p, 6);
    std::vector<std::vector<float>> results;
    for (const std::int64_t cols : {1, 2, 4})
      for (const Config& c : {bwd(128, 16, 2, 1, cols), bwd(128, 32, 2, 2, cols), bwd(256, 32, 2, 3, cols)}) {
        INFO(dtype << " " << c.str());
        Buffers b;
        for (const auto& hb : w.buffers) b.add(hb.bytes, hb.role != Role::kInput);
        run(backward_family(), c, p, b, 2);
        results.push_back(b.get<float>(2));
        CHECK(relative_l2(DType::kF32, b.get<std::byte>(2), w.buffers[2].expected) < 1e-5);
      }
    for (std::size_t i = 1; i < results.size(); ++i) {
      INFO(dtype << " run " << i);
      CHECK(std::memcmp(results[0].data(), results[i].data(), results[0].size() * 4) == 0);
    }
  }
}

TEST_CASE("embedding kernels: ids outside the vocabulary give NaN rows forward and nothing backward, and no "
          "access outside the buffers",
          "[embedding][emu]") {
  const std::int64_t rows = 50, dim = 24, vocab = 11;
  const auto tokens = tokens_with_bad_ids(rows, vocab);
  std::mt19937_64 rng(6);
  const auto table = random_floats(rng, vocab * dim, -1, 1), d_out = random_floats(rng, rows * dim, -1, 1);
  const Problem p = problem("f32", rows, dim, vocab);

  Buffers f;
  f.add(tokens);
  f.add(table);
  f.add(std::vector<float>(rows * dim), true);
  run(forward_family(), layout(64, 8, 4), p, f, 2);
  const auto out = f.get<float>(2);
  for (std::int64_t t = 0; t < rows; ++t)
    for (std::int64_t c = 0; c < dim; ++c) {
      const float got = out[static_cast<std::size_t>(t * dim + c)];
      if (is_bad(tokens[t], vocab))
        REQUIRE(std::isnan(got));
      else
        REQUIRE(got == table[static_cast<std::size_t>(tokens[t] * dim + c)]);
    }

  // The reference over the valid tokens only.
  std::vector<double> expected(vocab * dim, 0.0);
  for (std::int64_t t = 0; t < rows; ++t)
    if (!is_bad(tokens[t], vocab))
      for (std::int64_t c = 0; c < dim; ++c) expected[tokens[t] * dim + c] += d_out[t * dim + c];
  for (const std::int64_t deterministic : {0, 1}) {
    DYNAMIC_SECTION("backward, deterministic " << deterministic) {
      Buffers b;
      b.add(tokens);
      b.add(d_out);
      b.add(std::vector<float>(vocab * dim), true);
      b.add(std::vector<std::int32_t>(scratch_ints(p)), true);
      run(backward_family(), bwd(64, 8, 4, deterministic), p, b, 2);
      const auto d_table = b.get<float>(2);
      for (std::size_t i = 0; i < d_table.size(); ++i) REQUIRE(d_table[i] == Approx(expected[i]).margin(1e-6));
    }
  }
}

}  // namespace templates_embedding_family_emu_test
