// Row softmax kernels run by the host emulation backend against the CPU
// reference: non-default configs on ragged shapes, masked and not, each
// reduction path (shuffles only, across warps), and in place (y over x, dx
// over dy), which the runner's workloads never do.
#include <catch2/catch.hpp>
#include <cstring>
#include <limits>
#include <memory>
#include <cmath>
#include <random>

#include "templates/render.hpp"
#include "templates/softmax/softmax.hpp"
#include "tuner/emu/memory.hpp"
#include "tuner/emu/module.hpp"
#include "tuner/emu_launch.hpp"
#include "tuner/run/emu_runner.hpp"

namespace templates_softmax_family_emu_test {

using namespace ktune;
using namespace ktune::templates;
using namespace ktune::templates::softmax;

namespace {

Config layout(std::int64_t threads, std::int64_t row_threads, std::int64_t vec) {
  return Config({{"threads", threads}, {"row_threads", row_threads}, {"vec", vec}});
}
Problem problem(const char* dtype, std::int64_t rows, std::int64_t cols, std::int64_t causal) {
  return Problem{dtype, {{"rows", rows}, {"cols", cols}, {"causal", causal}}};
}

/// Runs `f` in place on fp32 rows: `data` is the buffer overwritten (x, or
/// dy), `other` the backward's y (empty for the forward). Returns the result.
std::vector<float> run_in_place(const Family& f, const Config& c, const Problem& p, const std::vector<float>& data,
                                const std::vector<float>& other) {
  const auto module = tuner::emu::load_module(f.render(c, p));
  std::vector<std::unique_ptr<tuner::emu::GuardedBuffer>> buffers;
  auto add = [&](const std::vector<float>& v) {
    auto& b = buffers.emplace_back(std::make_unique<tuner::emu::GuardedBuffer>("buffer", v.size() * sizeof(float)));
    std::memcpy(b->data(), v.data(), v.size() * sizeof(float));
    return reinterpret_cast<std::uint64_t>(b->data());
  };
  std::vector<Launch> launches;
  if (other.empty()) {
    const auto x = add(data);
    launches =
        forward_family().plan(c, p, ForwardArgs{.x = x, .y = x, .scale = kWorkloadScale}, tuner::EmuRunner().device());
  } else {
    const auto y = add(other), dy = add(data);
    launches = backward_family().plan(c, p, BackwardArgs{.y = y, .dy = dy, .dx = dy, .scale = kWorkloadScale},
                                      tuner::EmuRunner().device());
  }
  test::run_emulated(*module, launches, buffers, 2);
  const auto* out = reinterpret_cast<const float*>(buffers.back()->data());
  return std::vector<float>(out, out + data.size());
}

double relative_l2(const std::vector<float>& got, const std::vector<double>& expected) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - expected[i]) * (got[i] - expected[i]);
    den += expected[i] * expected[i];
  }
  return std::sqrt(num / den);
}

}  // namespace

TEST_CASE("softmax_fwd and softmax_bwd: non-default configs on ragged shapes match the reference",
          "[softmax][emu]") {
  for (const Family* f : std::vector<const Family*>{&forward_family(), &backward_family()}) {
    // 37 rows: the last block holds 1 row of 4 (or of 2); 1000 columns end
    // inside the last vector of the row's threads.
    DYNAMIC_SECTION(f->name() << ": f32, a warp per row, shuffles only") {
      test::check_emulated_matches_reference(*f, layout(128, 32, 4), problem("f32", 37, 1000, 0), 1);
    }
    DYNAMIC_SECTION(f->name() << ": bf16, rows across two warps, causal") {
      test::check_emulated_matches_reference(*f, layout(128, 64, 1), problem("bf16", 300, 100, 1), 1);
    }
    DYNAMIC_SECTION(f->name() << ": f32, sub-warp rows, scalar accesses, causal blocks of 37") {
      test::check_emulated_matches_reference(*f, layout(64, 16, 1), problem("f32", 111, 37, 1), 1);
    }
    DYNAMIC_SECTION(f->name() << ": bf16, one row per block") {
      test::check_emulated_matches_reference(*f, layout(128, 128, 8), problem("bf16", 5, 1000, 0), 1);
    }
  }
}

TEST_CASE("softmax kernels run in place: y over x, dx over dy", "[softmax][emu]") {
  for (const std::int64_t causal : {0, 1}) {
    DYNAMIC_SECTION("causal " << causal) {
      const Problem p = problem("f32", 3 * 200, 200, causal);
      const Config c = layout(256, 64, 4);
      std::mt19937_64 rng(9);
      const auto x = random_floats(rng, 600 * 200, -20, 20), dy = random_floats(rng, 600 * 200, -1, 1);
      const std::vector<double> xd(x.begin(), x.end()), dyd(dy.begin(), dy.end());
      std::vector<double> y(xd.size()), dx(xd.size());
      softmax_forward<double>(xd.data(), y.data(), 600, 200, kWorkloadScale, causal == 1);
      const std::vector<float> yf(y.begin(), y.end());
      const std::vector<double> yfd(yf.begin(), yf.end());
      softmax_backward<double>(yfd.data(), dyd.data(), dx.data(), 600, 200, kWorkloadScale, causal == 1);
      CHECK(relative_l2(run_in_place(forward_family(), c, p, x, {}), y) < 1e-5);
      CHECK(relative_l2(run_in_place(backward_family(), c, p, dy, yf), dx) < 1e-5);
    }
  }
}

TEST_CASE("softmax_bwd: a masked column's gradient is 0 where a NaN in its row's visible dy makes the others NaN",
          "[softmax][emu]") {
  // As PyTorch's masked_fill backward zeroes them: no NaN reaches the keys a query never saw. Row 2 (query 2)
  // sees columns 0 to 2; its dy holds a NaN at column 1 and another at a masked column, which is never read.
  const std::int64_t cols = 40, rows = 2 * cols;
  const Problem p = problem("f32", rows, cols, 1);
  std::mt19937_64 rng(4);
  const auto x = random_floats(rng, rows * cols, -5, 5);
  auto dy = random_floats(rng, rows * cols, -1, 1);
  const std::vector<double> xd(x.begin(), x.end());
  std::vector<double> y(xd.size()), dx(xd.size());
  softmax_forward<double>(xd.data(), y.data(), rows, cols, kWorkloadScale, true);
  const std::vector<float> yf(y.begin(), y.end());
  const std::vector<double> yfd(yf.begin(), yf.end()), dyd(dy.begin(), dy.end());
  softmax_backward<double>(yfd.data(), dyd.data(), dx.data(), rows, cols, kWorkloadScale, true);
  dy[2 * cols + 1] = dy[2 * cols + 30] = std::numeric_limits<float>::quiet_NaN();
  for (const Config& c : {layout(256, 64, 4), layout(64, 16, 1), layout(128, 32, 2)}) {
    DYNAMIC_SECTION(c.str()) {
      const auto got = run_in_place(backward_family(), c, p, dy, yf);
      for (std::int64_t col = 0; col < cols; ++col) {
        INFO("row 2, column " << col);
        if (col <= 2)
          CHECK(std::isnan(got[2 * cols + col]));
        else
          CHECK(got[2 * cols + col] == 0.0f);
      }
      std::vector<float> others = got;
      std::vector<double> expected = dx;
      others.erase(others.begin() + 2 * cols, others.begin() + 3 * cols);
      expected.erase(expected.begin() + 2 * cols, expected.begin() + 3 * cols);
      CHECK(relative_l2(others, expected) < 1e-5);
    }
  }
}

}  // namespace templates_softmax_family_emu_test
