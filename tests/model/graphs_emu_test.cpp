// Compiled mode's passes replayed as graphs (DeviceOptions::graphs) under the
// emulation, against the same model run op by op: over several steps, each
// on a new batch (which the graphs must read, not the one they were captured
// with), the losses, gradients and parameters agree; the first pass runs op
// by op, the second is captured, and a graph holds as many nodes as its pass
// launches (kernels and GEMMs), which the launch counter counts once a replay.
#include <catch2/catch.hpp>

#include "base/error.hpp"
#include "model/bench_e2e.hpp"
#include "model/device_check.hpp"
#include "model/device_model.hpp"
#include "tuner/exec/backend.hpp"

namespace model_graphs_emu_test {

using namespace ktune;
using namespace ktune::model;
using ktune::test::random_tokens;
using ktune::test::rel_l2;

namespace {

struct Run {
  Run(const ModelConfig& config, const RunShape& shape, Precision precision, bool graphs)
      : backend(tuner::exec::make_emu_backend({2})),
        model(*backend, config, shape, Allocation::kTrain,
              {.mode = Mode::kCompiled, .precision = precision, .graphs = graphs}) {}
  std::unique_ptr<tuner::exec::Backend> backend;
  DeviceTransformer model;
};

bool same(const LaunchCount& a, const LaunchCount& b) {
  return a.kernels == b.kernels && a.gemms == b.gemms && a.by_family == b.by_family;
}

}  // namespace

TEST_CASE("emu backend: passes replayed as graphs give the losses, gradients and parameters of a run op by op",
          "[emu][model]") {
  const ModelConfig config = model_config("tiny");
  const RunShape shape{2, 13};
  for (const Precision precision : {Precision::kF32, Precision::kBf16}) {
    INFO(to_string(precision));
    Run direct(config, shape, precision, false), graphed(config, shape, precision, true);
    templates::adamw::AdamwHyper hyper;
    hyper.lr = 1e-2f;
    for (int step = 0; step < 4; ++step) {
      INFO("step " << step);
      std::vector<std::int32_t> tokens, targets;
      random_tokens(shape.tokens(), config.vocab, 100 + step, tokens, targets);
      const LaunchCount d0 = direct.model.ops().launches(), g0 = graphed.model.ops().launches();
      const double want = direct.model.forward(tokens, targets);
      const LaunchCount forward_launches = direct.model.ops().launches().since(d0);
      CHECK(graphed.model.forward(tokens, targets) == Approx(want).epsilon(1e-6));
      direct.model.backward();
      graphed.model.backward();
      const LaunchCount step_launches = direct.model.ops().launches().since(d0);
      CHECK(same(graphed.model.ops().launches().since(g0), step_launches));
      const auto want_grads = direct.model.gradients();
      CHECK(rel_l2(graphed.model.gradients(), want_grads, 0, graphed.model.layout().params.total) <= 1e-6);
      // Op by op first; captured on the second pass, replayed after.
      if (step == 0) {
        CHECK(graphed.model.forward_graph_nodes() == 0);
        CHECK(graphed.model.backward_graph_nodes() == 0);
      } else {
        CHECK(graphed.model.forward_graph_nodes() == static_cast<std::size_t>(forward_launches.total()));
        CHECK(graphed.model.backward_graph_nodes() ==
              static_cast<std::size_t>(step_launches.total() - forward_launches.total()));
      }
      direct.model.step(hyper);
      graphed.model.step(hyper);
      CHECK(rel_l2(graphed.model.parameters(), direct.model.parameters(), 0,
                   graphed.model.layout().params.total) <= 1e-6);
    }
  }
}

TEST_CASE("emu backend: eager mode refuses graphs, which are compiled mode's", "[emu][model]") {
  auto backend = tuner::exec::make_emu_backend({1});
  try {
    DeviceTransformer m(*backend, model_config("tiny"), RunShape{1, 8}, Allocation::kTrain,
                        {.mode = Mode::kEager, .graphs = true});
    FAIL("eager mode took graphs");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kInvalidInput);
    CHECK_THAT(e.what(), Catch::Contains("compiled mode"));
  }
}

TEST_CASE("emu backend: bench e2e with graphs says which trials are no replays, under two warm-up steps",
          "[emu][model]") {
  E2eOptions o;
  o.backend.backend = "emu";
  o.backend.graphs = true;
  o.model = model_config("tiny");
  o.shape = RunShape{1, 8};
  o.trials = 1;
  o.passes = E2ePasses::kForward;
  const auto said = [&](std::int64_t warmup) {
    o.warmup = warmup;
    std::string all;
    for (const auto& w : bench_e2e(o).warnings) all += w + "\n";
    return all;
  };
  CHECK_THAT(said(0), Catch::Contains("trials 1 and 2 are no replays"));
  CHECK_THAT(said(1), Catch::Contains("trial 1 includes the capture"));
  CHECK_THAT(said(2), !Catch::Contains("capture"));
  o.backend.graphs = false;
  CHECK_THAT(said(1), !Catch::Contains("capture"));
}

}  // namespace model_graphs_emu_test
