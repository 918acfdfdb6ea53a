// SwiGLU gate kernels run by the host emulation backend against the CPU
// reference: non-default configs on a ragged n, and the paths the runner's
// workloads never take (misaligned pointers, a grid-stride loop over several
// tiles, the in-place gradient da == dh).
#include <catch2/catch.hpp>
#include <cstring>
#include <memory>
#include <random>

#include "templates/render.hpp"
#include "templates/swiglu/swiglu.hpp"
#include "tuner/emu/grid.hpp"
#include "tuner/emu/memory.hpp"
#include "tuner/emu/module.hpp"
#include "tuner/run/emu_runner.hpp"
#include "tuner/emu_launch.hpp"

namespace templates_swiglu_family_emu_test {

using namespace ktune;
using namespace ktune::templates;

namespace {

/// A config that differs from the default in every compile-time tunable.
Config non_default(const Family& f, const Problem& p) {
  Config c = f.default_config(p);
  c.set("threads", 64);
  c.set("vec", p.dtype == "bf16" ? 4 : 2);
  c.set("unroll", 4);
  c.set("blocks_per_sm", 1);
  return c;
}

/// The library's relative L2 error on fp32 vectors.
double relative_l2(const std::vector<float>& got, const std::vector<float>& expected) {
  auto bytes = [](const std::vector<float>& v) {
    const auto* p = reinterpret_cast<const std::byte*>(v.data());
    return std::vector<std::byte>(p, p + v.size() * sizeof(float));
  };
  return templates::relative_l2(DType::kF32, bytes(got), bytes(expected));
}

/// Runs one family's kernel on fp32 buffers of `n` elements that start
/// `offset` elements into their allocations, with the grid forced to `blocks`.
/// `in_place` passes dh as da (backward only). Returns the outputs.
std::vector<std::vector<float>> run_raw(const Family& f, const Config& c, std::int64_t n, std::size_t offset,
                                        unsigned blocks, bool in_place, const std::vector<std::vector<float>>& inputs) {
  const Problem p{"f32", {{"n", n}}};
  const auto module = tuner::emu::load_module(f.render(c, p));
  const std::size_t outputs = f.name() == "swiglu_fwd" ? 1 : 2;
  std::vector<std::unique_ptr<tuner::emu::GuardedBuffer>> buffers;
  std::vector<std::uint64_t> addresses;
  const std::size_t count = inputs.size() + outputs;
  for (std::size_t i = 0; i < count; ++i) {
    auto& b = buffers.emplace_back(
        std::make_unique<tuner::emu::GuardedBuffer>("buffer " + std::to_string(i), (n + offset) * sizeof(float)));
    b->fill(0xff);
    if (i < inputs.size()) std::memcpy(b->data() + offset * sizeof(float), inputs[i].data(), n * sizeof(float));
    addresses.push_back(reinterpret_cast<std::uint64_t>(b->data() + offset * sizeof(float)));
  }
  if (in_place) addresses[inputs.size()] = addresses[inputs.size() - 1];  // da = dh

  auto launches = f.plan(c, p, addresses, tuner::EmuRunner().device());
  REQUIRE(launches.size() == 1);
  launches[0].grid[0] = blocks;
  test::run_emulated(*module, launches, buffers, 2);

  std::vector<std::vector<float>> results;
  for (std::size_t o = 0; o < outputs; ++o) {
    const auto* data = reinterpret_cast<const float*>(addresses[inputs.size() + o]);
    results.emplace_back(data, data + n);
  }
  return results;
}

}  // namespace

TEST_CASE("swiglu kernels with non-default configs match the reference on a ragged n", "[swiglu][emu]") {
  tuner::EmuRunner runner;
  for (const Family* f : std::vector<const Family*>{&swiglu::forward_family(), &swiglu::backward_family()}) {
    for (const char* dtype : {"f32", "bf16"}) {
      // 4099 is a multiple of no vector width: the scalar tail runs.
      const Problem p{dtype, {{"n", 4099}}};
      const Config c = non_default(*f, p);
      DYNAMIC_SECTION(f->name() << " " << p.key() << " " << c.str()) {
        REQUIRE(c != f->default_config(p));
        REQUIRE(f->is_valid(c, p, runner.device()));
        tuner::RunOptions options;
        options.seed = 11;
        const auto result = runner.run(*f, c, p, options);
        INFO(result.failure);
        REQUIRE(result.ok);
        CHECK(result.errors.size() == (f->name() == "swiglu_fwd" ? 1u : 2u));
        for (const auto& [name, error] : result.errors) {
          INFO(name);
          CHECK(error < tolerance_for(dtype));
        }
      }
    }
  }
}

TEST_CASE("swiglu kernels: misaligned pointers, several tiles per block, gradient in place", "[swiglu][emu]") {
  const std::int64_t n = 3001;
  std::mt19937_64 rng(3);
  const auto a = random_floats(rng, n, -6, 6), b = random_floats(rng, n, -2, 2), dh = random_floats(rng, n, -1, 1);
  std::vector<float> h(n), da(n), db(n);
  swiglu::swiglu_forward(a.data(), b.data(), h.data(), n);
  swiglu::swiglu_backward(a.data(), b.data(), dh.data(), da.data(), db.data(), n);
  const Family& fwd = swiglu::forward_family();
  const Family& bwd = swiglu::backward_family();
  Config c = fwd.default_config(Problem{"f32", {{"n", n}}});
  c.set("threads", 64);
  c.set("vec", 4);
  c.set("unroll", 2);
  // Offset 0: 16-byte aligned, vector path; 3 blocks of 512-element tiles
  // grid-stride over 3001 elements. Offset 1: 4-byte aligned only, scalar path.
  for (const std::size_t offset : {0, 1}) {
    for (const bool in_place : {false, true}) {
      DYNAMIC_SECTION("offset " << offset << (in_place ? ", da = dh" : "")) {
        const auto out_f = run_raw(fwd, c, n, offset, 3, false, {a, b});
        CHECK(relative_l2(out_f[0], h) < 1e-5);
        const auto out_b = run_raw(bwd, c, n, offset, 3, in_place, {a, b, dh});
        CHECK(relative_l2(out_b[0], da) < 1e-5);
        CHECK(relative_l2(out_b[1], db) < 1e-5);
      }
    }
  }
}

}  // namespace templates_swiglu_family_emu_test
