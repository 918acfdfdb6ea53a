// Every eager decomposition run by the host emulation, primitive launch by
// primitive launch, against the fused family's own CPU reference: ragged
// shapes (no multiple of a block, warp or vector), f32 and bf16, outputs
// poisoned first; and a broken chain that must fail.
#include <catch2/catch.hpp>
#include <cstring>
#include <memory>

#include "templates/eager/eager.hpp"
#include "tuner/emu_launch.hpp"

namespace templates_eager_eager_emu_test {

using namespace ktune;
using namespace ktune::templates;

namespace {

/// Buffers given in place of others: an output's name -> the input whose
/// address it gets (the chain runs in place; the result is read from there).
using Aliases = std::map<std::string, std::string>;

/// Runs `chain` (the decomposition of `family`) on the fused family's
/// workload and returns each output's relative L2 error against its reference
/// and, in `tolerances`, the workload's tolerance for it.
std::map<std::string, double> run_chain(const std::string& family, const Problem& p,
                                        const eager::Decomposition& chain,
                                        std::map<std::string, double>* tolerances = nullptr,
                                        const Aliases& aliases = {}) {
  const Family& fused = find_family(family);
  const Workload w = fused.make_workload(p, 21);
  std::vector<std::unique_ptr<tuner::emu::GuardedBuffer>> buffers;
  std::map<std::string, std::size_t> index;
  for (const auto& hb : w.buffers) {
    auto& b = buffers.emplace_back(std::make_unique<tuner::emu::GuardedBuffer>(hb.name, hb.bytes.size()));
    b->fill(0xff);  // NaN in every float type
    if (hb.role != Role::kOutput) std::memcpy(b->data(), hb.bytes.data(), hb.bytes.size());
    index[hb.name] = index.size();
  }
  // The buffer each workload buffer lives in: its own, or the one it aliases.
  auto home = [&](std::size_t i) {
    const auto it = aliases.find(w.buffers[i].name);
    return it == aliases.end() ? i : index.at(it->second);
  };
  std::vector<std::uint64_t> addresses;
  for (std::size_t i = 0; i < w.buffers.size(); ++i)
    addresses.push_back(reinterpret_cast<std::uint64_t>(buffers[home(i)]->data()));
  const eager::Bindings bindings = eager::bind_workload(family, p, addresses);
  std::size_t temp_bytes = 0;
  for (const auto& t : chain.temporaries) temp_bytes += (t.elements * size_of(t.dtype) + 255) / 256 * 256;
  auto& temps = buffers.emplace_back(std::make_unique<tuner::emu::GuardedBuffer>("temporaries", temp_bytes + 256));
  temps->fill(0xff);
  const auto address = (reinterpret_cast<std::uint64_t>(temps->data()) + 255) / 256 * 256;
  const auto plan = eager::plan(family, chain, bindings, address, tuner::EmuRunner().device());
  CHECK(plan.temporaries_bytes == temp_bytes);
  for (auto step : plan.steps) {
    INFO(step.family->name() << " " << step.problem.key());
    REQUIRE(step.family->is_valid(step.config, step.problem, tuner::EmuRunner().device()));
    const auto module = tuner::emu::load_module(step.family->render(step.config, step.problem));
    test::run_emulated(*module, step.launches, buffers, 1);
  }
  std::map<std::string, double> errors;
  for (std::size_t i = 0; i < w.buffers.size(); ++i)
    if (w.buffers[i].role == Role::kOutput) {
      if (tolerances) (*tolerances)[w.buffers[i].name] = w.buffers[i].tolerance;
      const auto& b = *buffers[home(i)];
      errors[w.buffers[i].name] =
          relative_l2(w.buffers[i].dtype, std::vector<std::byte>(b.data(), b.data() + b.size()), w.buffers[i].expected);
    }
  return errors;
}

void check_chain(const std::string& family, const Problem& p, const Aliases& aliases = {}) {
  INFO(family << " " << p.key() << (aliases.empty() ? "" : " in place"));
  std::map<std::string, double> tolerances;
  const auto errors = run_chain(family, p, eager::decompose(family, p), &tolerances, aliases);
  CHECK_FALSE(errors.empty());
  for (const auto& [name, error] : errors) {
    INFO(name << " error " << error << ", tolerance " << tolerances.at(name));
    CHECK(error <= tolerances.at(name));
  }
}

}  // namespace

TEST_CASE("eager chains match the fused families' references when emulated", "[eager][emu]") {
  // Rows and widths that are no multiple of a block (256), a warp or a vector.
  for (const char* dtype : {"f32", "bf16"}) {
    DYNAMIC_SECTION(dtype) {
      const Problem rows{dtype, {{"rows", 37}, {"dim", 250}}};
      check_chain("rmsnorm_fwd", rows);
      check_chain("rmsnorm_bwd", rows);
      check_chain("residual_rmsnorm_fwd", rows);
      check_chain("residual_rmsnorm_bwd", rows);
      const Problem gate{dtype, {{"n", 4999}}};
      check_chain("swiglu_fwd", gate);
      check_chain("swiglu_bwd", gate);
      const Problem loss{dtype, {{"rows", 19}, {"vocab", 1001}}};
      check_chain("cross_entropy_fwd", loss);
      check_chain("cross_entropy_bwd", loss);
    }
  }
}

TEST_CASE("eager softmax chains match the softmax reference, causal or not, in place", "[eager][emu]") {
  // Rows that leave a block short; 37 keys (odd) and 100 keys over 3 heads for the causal blocks.
  for (const char* dtype : {"f32", "bf16"}) {
    DYNAMIC_SECTION(dtype) {
      for (const Problem& p : {Problem{dtype, {{"rows", 45}, {"cols", 77}, {"causal", 0}}},
                               Problem{dtype, {{"rows", 111}, {"cols", 37}, {"causal", 1}}},
                               Problem{dtype, {{"rows", 300}, {"cols", 100}, {"causal", 1}}}}) {
        check_chain("softmax_fwd", p);
        check_chain("softmax_fwd", p, {{"y", "x"}});
        check_chain("softmax_bwd", p);
        check_chain("softmax_bwd", p, {{"dx", "dy"}});
      }
    }
  }
}

TEST_CASE("eager rope chains match the rope reference, in place, with a partial last sequence", "[eager][emu]") {
  for (const char* dtype : {"f32", "bf16"}) {
    DYNAMIC_SECTION(dtype) {
      // 37 tokens of sequences of 10: three whole ones and 7 tokens more; head dims 18 (9 pairs) and 80.
      for (const Problem& p : {Problem{dtype, {{"tokens", 37}, {"heads", 3}, {"head_dim", 18}, {"seq", 10}}},
                               Problem{dtype, {{"tokens", 24}, {"heads", 2}, {"head_dim", 80}, {"seq", 12}}},
                               Problem{dtype, {{"tokens", 5}, {"heads", 1}, {"head_dim", 6}, {"seq", 9}}}}) {
        check_chain("rope_fwd", p);
        check_chain("rope_fwd", p, {{"y", "x"}});
        check_chain("rope_bwd", p);
        check_chain("rope_bwd", p, {{"dx", "dy"}});
      }
    }
  }
}

TEST_CASE("eager embedding chains match the embedding reference", "[eager][emu]") {
  // Ragged rows and widths; 7 ids over 300 tokens repeat each id many times.
  for (const char* dtype : {"f32", "bf16"}) {
    DYNAMIC_SECTION(dtype) {
      for (const Problem& p : {Problem{dtype, {{"rows", 37}, {"dim", 100}, {"vocab", 50}}},
                               Problem{dtype, {{"rows", 300}, {"dim", 36}, {"vocab", 7}}}}) {
        check_chain("embedding_fwd", p);
        check_chain("embedding_bwd", p);
      }
    }
  }
}

TEST_CASE("a broken eager chain fails the same check", "[eager][emu]") {
  const Problem p{"f32", {{"rows", 37}, {"dim", 250}}};
  SECTION("rmsnorm_fwd without eps") {
    auto chain = eager::decompose("rmsnorm_fwd", p);
    for (auto& s : chain.steps)
      if (s.family->name() == "prim_add_scalar") s.alpha = 1.0f;  // eps 1 instead of 1e-5
    const auto errors = run_chain("rmsnorm_fwd", p, chain);
    CHECK(errors.at("y") > 1e-2);
  }
  SECTION("rmsnorm_bwd without the path through the square") {
    auto chain = eager::decompose("rmsnorm_bwd", p);
    for (auto& s : chain.steps)
      if (s.family->name() == "prim_add") s.b = s.x;  // dx = 2 * the direct path
    CHECK(run_chain("rmsnorm_bwd", p, chain).at("dx") > 1e-2);
  }
  SECTION("cross_entropy_bwd without the one-hot") {
    const Problem loss{"f32", {{"rows", 19}, {"vocab", 1001}}};
    auto chain = eager::decompose("cross_entropy_bwd", loss);
    for (auto& s : chain.steps)
      if (s.family->name() == "prim_scatter_add") s.alpha = 0.0f;
    CHECK(run_chain("cross_entropy_bwd", loss, chain).at("dlogits") > 1e-2);
  }
  const Problem scores{"f32", {{"rows", 111}, {"cols", 37}, {"causal", 1}}};
  SECTION("softmax_fwd without the causal mask") {
    auto chain = eager::decompose("softmax_fwd", scores);
    std::erase_if(chain.steps, [](const eager::Step& s) { return s.family->name() == "prim_causal_mask"; });
    CHECK(run_chain("softmax_fwd", scores, chain).at("y") > 1e-2);
  }
  SECTION("rope_fwd with the halves' sum and difference swapped") {
    const Problem p{"f32", {{"tokens", 37}, {"heads", 3}, {"head_dim", 18}, {"seq", 10}}};
    auto chain = eager::decompose("rope_fwd", p);
    for (auto& s : chain.steps)
      if (s.family->name() == "prim_strided_sub") s.family = &eager::strided_binary_family(eager::Binary::kAdd);
    CHECK(run_chain("rope_fwd", p, chain).at("y") > 1e-2);
  }
  SECTION("embedding_bwd without the zero fill") {
    const Problem p{"f32", {{"rows", 37}, {"dim", 100}, {"vocab", 50}}};
    auto chain = eager::decompose("embedding_bwd", p);
    std::erase_if(chain.steps, [](const eager::Step& s) { return s.family->name() == "prim_fill"; });
    CHECK(run_chain("embedding_bwd", p, chain).at("d_table") > 1e-2);  // NaN: the poison stays
  }
  SECTION("softmax_bwd without the scale") {
    auto chain = eager::decompose("softmax_bwd", scores);
    for (auto& s : chain.steps)
      if (s.family->name() == "prim_scale") s.alpha_from.clear(), s.alpha = 1.0f;
    CHECK(run_chain("softmax_bwd", scores, chain).at("dx") > 1e-2);
  }
}

}  // namespace templates_eager_eager_emu_test
