// On a GPU: every AdamW variant matches the CPU reference (fresh random
// inputs, outputs poisoned first). Skipped without a device.
#include <catch2/catch.hpp>

#include "support.hpp"
#include "tuner/run/gpu_runner.hpp"

namespace tuner_adamw_gpu_test {

using namespace ktune;
using namespace ktune::tuner;

TEST_CASE("every AdamW variant matches the CPU reference on the GPU", "[gpu][adamw]") {
  test::skip_without_gpu();
  auto runner = make_gpu_runner();
  for (const char* name : {"adamw", "adamw_single", "adamw_eager"}) {
    const auto& family = templates::find_family(name);
    auto problems = family.problem_classes();
    // Also a tensor of a megabyte per buffer: uploads that big are staged by
    // the driver, and a kernel must still see them complete.
    problems.push_back(Problem{"f32", {{"tensors", 2}, {"numel", 262144}}});
    for (const auto& problem : problems) {
      for (std::uint64_t i = 0; i < family.space().size(); ++i) {
        const Config c = family.space().at(i);
        if (!family.is_valid(c, problem, runner->device())) continue;
        RunOptions o;
        o.seed = 100 + i;
        const RunResult r = runner->run(family, c, problem, o);
        INFO(name << " " << c.str() << " " << problem.key() << ": " << r.failure);
        CHECK(r.ok);
      }
    }
  }
}

}  // namespace tuner_adamw_gpu_test
