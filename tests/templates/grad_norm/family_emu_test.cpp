// grad_norm run by the host emulation against the CPU reference: ragged
// tensors, several launches' worth of tensors, the norm repeating bit for
// bit whatever the schedule, and broken variants that must fail.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>

#include "templates/emulated_plan.hpp"
#include "templates/grad_norm/grad_norm.hpp"

namespace templates_grad_norm_family_emu_test {

using namespace ktune;
using namespace ktune::templates;

namespace {
Config config(std::int64_t threads, std::int64_t vec, std::int64_t chunk, std::int64_t blocks_per_sm) {
  return Config({{"threads", threads}, {"vec", vec}, {"chunk", chunk}, {"blocks_per_sm", blocks_per_sm}});
}
Problem problem(std::int64_t tensors, std::int64_t numel, bool in_place = true) {
  return Problem{"f32", {{"tensors", tensors}, {"numel", numel}, {"in_place", in_place ? 1 : 0}}};
}
}  // namespace

TEST_CASE("grad_norm: norm, clip factor and clipped gradients match the reference", "[grad_norm][emu]") {
  const Family& f = grad_norm::family();
  SECTION("few tensors, scalar tails and ragged chunks") {
    test::check_emulated_plan(f, config(128, 4, 4096, 2), problem(3, 9001));
    test::check_emulated_plan(f, config(256, 1, 4096, 8), problem(5, 4097));
  }
  SECTION("the norm and factor alone, for an optimizer that reads the factor") {
    test::check_emulated_plan(f, config(128, 4, 4096, 2), problem(3, 9001, false));
    test::check_emulated_plan(f, config(256, 2, 4096, 4), problem(70, 333, false));
  }
  SECTION("more tensors than one launch holds") {
    test::check_emulated_plan(f, config(128, 2, 4096, 4), problem(131, 77));
  }
  SECTION("bit for bit on one or two workers") {
    const Problem p = problem(3, 20011);
    const Config c = config(128, 4, 4096, 2);
    const auto one = test::emulated_errors(f, f.render(c, p), c, p, 3, {}, 1);
    const auto two = test::emulated_errors(f, f.render(c, p), c, p, 3, {}, 2);
    CHECK(one == two);
  }
  SECTION("broken variants fail") {
    const Problem p = problem(3, 9001);
    const Config c = config(128, 4, 4096, 2);
    CHECK(test::broken_error(f, c, p, "const float norm = sqrtf(sum);", "const float norm = sum;") > 1e-2);
    CHECK(test::broken_error(f, c, p, "sum += v->v[k] * v->v[k];", "sum += v->v[k];") > 1e-2);
  }
}

TEST_CASE("grad_norm: a NaN gradient makes the norm and the clip factor NaN, and every gradient scaled by it, as "
          "torch's clip_grad_norm_",
          "[grad_norm][emu]") {
  // min(1, max_norm / (NaN + 1e-6)) is NaN in torch.clamp, where a `factor < 1` test took 1 and left every
  // gradient but the NaN one as it was.
  const Family& f = grad_norm::family();
  for (const bool in_place : {true, false}) {
    DYNAMIC_SECTION((in_place ? "in place" : "norm and factor alone")) {
      const Problem p = problem(3, 1001, in_place);
      const Config c = config(128, 4, 4096, 2);
      templates::Workload w = f.make_workload(p, 5);
      const float nan = std::numeric_limits<float>::quiet_NaN();
      std::memcpy(w.buffers[1].bytes.data() + 4 * 17, &nan, 4);
      const auto out = test::emulated_outputs(f, w, f.render(c, p), c, p);
      const auto value = [&](std::size_t buffer, std::size_t i) {
        float v;
        std::memcpy(&v, out.at(buffer).data() + 4 * i, 4);
        return v;
      };
      CHECK(std::isnan(value(3, 0)));  // the norm
      CHECK(std::isnan(value(3, 1)));  // the factor
      if (in_place)
        for (std::size_t t = 0; t < 3; ++t) {
          INFO("tensor " << t);
          CHECK(std::isnan(value(t, 0)));
          CHECK(std::isnan(value(t, 1000)));
        }
      CHECK(std::isnan(grad_norm::clip_factor(std::nan(""), 1.0)));  // the reference, and the cpu backend's clip
      CHECK(grad_norm::clip_factor(0.0, 1.0) == 1.0);
      CHECK(grad_norm::clip_factor(INFINITY, 1.0) == 0.0);
    }
  }
}

}  // namespace templates_grad_norm_family_emu_test
