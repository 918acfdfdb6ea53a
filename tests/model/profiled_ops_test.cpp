// Per-op profiles of the walk (model/ops/profiled_ops.hpp): an OpProfile on a
// clock of its own, and `bench e2e --profile` on the cpu backend.
#include "model/ops/profiled_ops.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <utility>

#include "model/bench_e2e.hpp"

namespace model_profiled_ops_test {

using namespace ktune;
using namespace ktune::model;

namespace {

// A clock that reads a counter the test moves.
struct Tick final : tuner::exec::Mark {
  explicit Tick(double t) : t(t) {}
  double t;
};

// Calls per step of each (phase, op), summed over shapes.
std::map<std::pair<std::string, std::string>, std::int64_t> calls(const std::vector<OpTimes>& rows) {
  std::map<std::pair<std::string, std::string>, std::int64_t> n;
  for (const auto& r : rows) n[{r.phase, r.op}] += r.calls;
  return n;
}

}  // namespace

TEST_CASE("an op profile sums each op's calls of a step between the clock's marks, per phase, op and shape",
          "[model][profile]") {
  double now = 0;
  OpProfile profile({[&] { return std::make_unique<Tick>(now); },
                     [](const tuner::exec::Mark& from, const tuner::exec::Mark& to) {
                       return static_cast<const Tick&>(to).t - static_cast<const Tick&>(from).t;
                     }});
  const auto op = [&](const char* phase, const char* name, const char* shape, double ms) {
    profile.time(phase, name, shape, 100 * ms, [&] { now += ms; });
  };
  op("forward", "gemm", "8x8x8 NT", 5);  // outside a step: runs, untimed
  for (int step = 0; step < 3; ++step) {
    profile.begin_step();
    op("forward", "gemm", "8x8x8 NT", 1);
    op("forward", "gemm", "8x8x8 NT", 2);
    op("forward", "gemm", "8x4x8 NT", 4 + step);
    op("backward", "gemm", "8x8x8 NT", 8);
    profile.end_step();
  }
  CHECK(now == 5 + 3 * 15 + 3);
  const auto& rows = profile.rows();
  REQUIRE(rows.size() == 3);
  CHECK(profile.steps() == 3);
  CHECK((rows[0].phase == "forward" && rows[0].shape == "8x8x8 NT" && rows[0].calls == 2));
  CHECK(rows[0].flops == 300);  // a step's calls: 100 + 200
  CHECK(rows[0].device_ms == std::vector<double>{3, 3, 3});
  CHECK(rows[1].device_ms == std::vector<double>{4, 5, 6});
  CHECK((rows[2].phase == "backward" && rows[2].calls == 1));
  CHECK(rows[2].host_ms.size() == 3);
  // Every step of a walk runs the same ops: one first seen later is an error, not a row without its early steps.
  profile.begin_step();
  CHECK_THROWS_WITH(op("optimizer", "adamw_step", "1 tensors, 8 values", 1),
                    Catch::Contains("ran in profiled step 4 but not in the first"));
}

TEST_CASE("bench e2e --profile times every op of the walk in its phase, after the timed trials",
          "[model][profile][bench]") {
  E2eOptions o;
  o.model = model_config("tiny");
  o.shape = RunShape{2, 12};
  o.warmup = 0;
  o.trials = 2;
  o.backend.threads = 2;
  o.passes = E2ePasses::kStep;
  CHECK(to_json(bench_e2e(o)).at("profile").is_null());
  o.profile = true;
  const E2eResult r = bench_e2e(o);
  const std::int64_t layers = o.model.layers;
  const auto n = calls(r.profile);
  CHECK(n.at({"forward", "embedding_forward"}) == 1);
  CHECK(n.at({"forward", "rmsnorm_forward"}) == 1);
  CHECK(n.at({"forward", "rope_forward"}) == 2 * layers);
  CHECK(n.at({"forward", "attention_forward"}) == layers);
  CHECK(n.at({"forward", "residual_rmsnorm_forward"}) == 2 * layers);
  CHECK(n.at({"forward", "swiglu_forward"}) == layers);
  CHECK(n.at({"forward", "gemm"}) == 7 * layers + 1);  // q, k, v, o, w1, w3, w2; the head
  CHECK(n.at({"forward", "mean"}) == 1);
  CHECK(n.at({"backward", "attention_backward"}) == layers);
  CHECK(n.at({"backward", "residual_rmsnorm_backward"}) == 2 * layers);
  CHECK(n.at({"backward", "embedding_backward"}) == 1);
  CHECK(n.at({"optimizer", "adamw_step"}) == 1);
  CHECK(n.size() == 9 + 8 + 1);  // the forward's ops, the backward's, AdamW
  // FLOPs a step: 2 m n k a GEMM (the LM head's: tokens x vocab x d_model), attention's causal half of
  // 4 B H S^2 d forward and 2.5 times that backward, nothing for the other ops.
  const double tokens = static_cast<double>(o.shape.tokens()), s = static_cast<double>(o.shape.context);
  const double attention = 0.5 * 4 * static_cast<double>(o.shape.batch * o.model.heads) * s * s *
                           static_cast<double>(o.model.head_dim()) * static_cast<double>(layers);
  const std::string head = fmt::format("{}x{}x{} NT", o.shape.tokens(), o.model.vocab, o.model.d_model);
  int checked = 0;
  for (const auto& row : r.profile) {
    INFO(row.phase << " " << row.op << " " << row.shape);
    if (row.op == "attention_forward") CHECK(row.flops == Approx(attention));
    if (row.op == "attention_backward") CHECK(row.flops == Approx(2.5 * attention));
    if (row.op == "gemm" && row.phase == "forward" && row.shape == head) {
      CHECK(row.flops == Approx(2 * tokens * static_cast<double>(o.model.vocab * o.model.d_model)));
      ++checked;
    }
    if (row.op != "gemm" && !row.op.starts_with("attention_")) CHECK(row.flops == 0);
  }
  CHECK(checked == 1);
  for (const auto& row : r.profile) {
    INFO(row.phase << " " << row.op << " " << row.shape);
    REQUIRE(row.device_ms.size() == 2);
    CHECK(row.host_ms.size() == 2);
    CHECK(row.device_ms[0] >= 0);
  }
  const auto j = to_json(r).at("profile");
  REQUIRE(j.size() == r.profile.size());
  CHECK(j[0].at("device_ms").at("median_ms").get<double>() >= 0);
  CHECK(j[0].at("calls").get<std::int64_t>() == r.profile[0].calls);

  // Each phase's time by kind: the sums of its ops' medians, GEMMs, attention and the rest; then all three.
  const auto kinds = phase_kinds(r.profile);
  REQUIRE(kinds.size() == 4);
  double sums[3][3] = {};  // phase x kind
  const std::vector<std::string> phases = {"forward", "backward", "optimizer"};
  for (const auto& row : r.profile) {
    const auto p = std::find(phases.begin(), phases.end(), row.phase) - phases.begin();
    REQUIRE(p < 3);
    const int kind = row.op == "gemm" ? 0 : row.op.starts_with("attention_") ? 1 : 2;
    sums[p][kind] += phase_stats(row.device_ms).median_ms;
  }
  for (std::size_t p = 0; p < 3; ++p) {
    INFO(phases[p]);
    CHECK(kinds[p].phase == phases[p]);
    CHECK(kinds[p].gemm_ms == Approx(sums[p][0]));
    CHECK(kinds[p].attention_ms == Approx(sums[p][1]));
    CHECK(kinds[p].rest_ms == Approx(sums[p][2]));
  }
  CHECK(kinds[0].gemm_ms > 0);
  CHECK(kinds[1].attention_ms > 0);
  CHECK(kinds[2].gemm_ms == 0);  // AdamW is no product
  CHECK(kinds[3].phase == "all");
  CHECK(kinds[3].total_ms() == Approx(kinds[0].total_ms() + kinds[1].total_ms() + kinds[2].total_ms()));
  CHECK(kinds[3].gemm_ms == Approx(kinds[0].gemm_ms + kinds[1].gemm_ms));
  const auto jp = to_json(r).at("profile_phases");
  REQUIRE(jp.size() == 4);
  CHECK(jp[1].at("phase") == "backward");
  CHECK(jp[1].at("attention_ms").get<double>() == Approx(kinds[1].attention_ms));
  // Forward and backward only: no optimizer row.
  o.passes = E2ePasses::kForwardBackward;
  const auto two = phase_kinds(bench_e2e(o).profile);
  REQUIRE(two.size() == 3);
  CHECK((two[0].phase == "forward" && two[1].phase == "backward" && two[2].phase == "all"));
}

}  // namespace model_profiled_ops_test
