// The execution seam under the emulation: a family's plan launched through
// the backend gives the family's CPU reference; a launch that cannot be
// resident is refused by the one fit check, with its reason; tuned kernels
// come from the cache service through the backend. A captured graph runs
// nothing until replayed and then reads memory as it is; under capture the
// emulation refuses what CUDA refuses (anything that waits for the device) and
// records host work in order.
#include "tuner/exec/backend.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <thread>

#include "base/error.hpp"
#include "cache/key.hpp"
#include "cache/tuned_cache.hpp"
#include "tuner/compile/compiler.hpp"
#include "tuner/exec/run_through.hpp"
#include "tuner/session/tuned_kernels.hpp"

namespace tuner_exec_backend_emu_test {

using namespace ktune;
using namespace ktune::tuner;


TEST_CASE("exec: an emulated measurement warms up once and keeps a spread of a slow variant", "[emu][exec]") {
  auto backend = exec::make_emu_backend({1, "sm_80"});
  RunOptions o;  // 3 warm-ups, 10 to 200 repetitions, 50 ms
  o.min_seconds = 0.05;
  int calls = 0;
  // A launch of 30 ms: the first of them cold, 10x slower.
  const auto slow = [&] { std::this_thread::sleep_for(std::chrono::milliseconds(calls++ == 0 ? 300 : 30)); };
  const Measurement m = backend->time(slow, o, "1 launch");
  CHECK(calls == 1 + 3);  // one warm-up, then three samples (one reached 50 ms)
  CHECK(m.repetitions == 3);
  CHECK(m.median_ms < 100);  // the cold launch is not among them
  CHECK_THAT(m.method, Catch::Contains("1 warm-up, 3 repetitions"));
  // One that asks for a single repetition gets it.
  calls = 0;
  o.warmup = 0;
  o.min_repetitions = o.max_repetitions = 1;
  CHECK(backend->time(slow, o, "1 launch").repetitions == 1);
  CHECK(calls == 1);
}

TEST_CASE("exec: a family's plan through the emulation backend gives its reference", "[emu][exec]") {
  auto backend = exec::make_emu_backend({2, "sm_80"});
  CHECK(backend->name() == "emu");
  for (const char* name : {"rmsnorm_fwd", "swiglu_bwd", "cross_entropy_fwd"}) {
    const auto& family = templates::find_family(name);
    const auto problem = family.problem_classes().front();
    const Config config = family.default_config(problem);
    INFO(name << " " << problem.key());
    const auto module = backend->load(family.render(config, problem));
    CHECK(module->kernel_names() == family.render(config, problem).kernels);
    CHECK(test::run_through(*backend, family, config, problem, *module) < 1e-5);
  }
}

TEST_CASE("exec: poisoned outputs stay NaN when a kernel writes nothing", "[emu][exec]") {
  auto backend = exec::make_emu_backend({1, "sm_80"});
  auto b = backend->allocate(64, "out");
  backend->poison(*b);
  std::vector<float> host(16, 0.f);
  backend->download(host.data(), *b, 64);
  for (float f : host) CHECK(std::isnan(f));
}

TEST_CASE("exec: a launch that cannot be resident is refused by the one fit check, with its reason", "[emu][exec]") {
  const auto device = DeviceLimits::for_arch("sm_80");
  const std::vector<std::string> names = {"k"};
  templates::Launch l;
  l.block = {1024, 2, 1};
  std::vector<templates::Launch> plan;
  plan.push_back(l);
  SECTION("too many threads") {
    const auto fit = exec::check_fit(names, {}, plan, device);
    CHECK_FALSE(fit.fits());
    CHECK(fit.kernel == "k");
    CHECK_THAT(fit.verdict.reason, Catch::Contains("2048 threads per block exceed the limit of 1024"));
  }
  SECTION("too much dynamic shared memory for sm_80") {
    plan[0].block = {128, 1, 1};
    plan[0].dynamic_smem = 200 * 1024;
    const auto fit = exec::check_fit(names, {}, plan, device);
    CHECK_FALSE(fit.fits());
    CHECK_THAT(fit.verdict.reason, Catch::Contains("shared memory per block exceed the limit of 166912"));
  }
  SECTION("the compiler's registers: 255 x 512 threads overflow the register file") {
    plan[0].block = {512, 1, 1};
    KernelResources r;
    r.registers = 255;
    const auto fit = exec::check_fit(names, {r}, plan, device);
    CHECK_FALSE(fit.fits());
    CHECK_THAT(fit.verdict.reason, Catch::Contains("register file"));
  }
  SECTION("of launches that fit, the verdict is the worst: a spilling kernel ranks last") {
    const std::vector<std::string> two = {"a", "b"};
    KernelResources fine, spills;
    fine.registers = spills.registers = 32;
    spills.spill_store_bytes = 16;
    plan[0].block = {256, 1, 1};
    templates::Launch second;
    second.kernel = 1;
    second.block = {256, 1, 1};
    plan.push_back(second);
    const auto fit = exec::check_fit(two, {fine, spills}, plan, device);
    CHECK(fit.fits());
    CHECK(fit.kernel == "b");
    CHECK(fit.verdict.verdict == search::Verdict::kRankLast);
  }
  SECTION("a plan naming a kernel the source lacks") {
    plan[0].kernel = 3;
    CHECK_THAT(exec::check_fit(names, {}, plan, device).verdict.reason, Catch::Contains("names kernel 3"));
  }
  SECTION("the emulation backend refuses to launch it") {
    auto backend = exec::make_emu_backend({1, "sm_80"});
    const auto& family = templates::find_family("swiglu_fwd");
    const auto problem = family.problem_classes().front();
    const auto module = backend->load(family.render(family.default_config(problem), problem));
    plan[0].block = {2048, 1, 1};
    CHECK_THROWS_WITH(backend->launch(*module, plan), Catch::StartsWith("does not fit: ") &&
                                                          Catch::Contains("2048 threads per block"));
  }
}

TEST_CASE("tuned kernels: configs from the cache service, compiled and loaded on the backend", "[emu][exec]") {
  auto backend = exec::make_emu_backend({2, "sm_80"});
  const auto& norm = templates::find_family("rmsnorm_fwd");
  const auto& gate = templates::find_family("swiglu_fwd");
  const templates::Problem tuned_problem{"f32", {{"rows", 67}, {"dim", 768}}};
  const templates::Problem near_problem{"f32", {{"rows", 50}, {"dim", 768}}};
  const templates::Problem gate_problem = gate.problem_classes().front();
  // A tuned entry whose config is not the default, for this backend's device.
  Config tuned = norm.default_config(tuned_problem);
  tuned.set("threads", tuned.at("threads") == 512 ? 256 : 512);
  REQUIRE(norm.is_valid(tuned, tuned_problem, backend->device()));
  cache::Entry e;
  e.key = cache_key(norm, tuned_problem, backend->device());
  e.config = tuned.to_json();
  e.time_ms = e.p20_ms = e.p80_ms = 1;
  e.repetitions = 1;
  const cache::TunedCache cache({e});

  TunedKernels kernels(*backend, &cache);
  kernels.prepare({{&norm, tuned_problem}, {&gate, gate_problem}, {&norm, near_problem}, {&norm, tuned_problem}});
  REQUIRE(kernels.kernels().size() == 3);  // asked twice, prepared once
  CHECK(kernels.count(cache::Match::kExact) == 1);
  CHECK(kernels.count(cache::Match::kNearest) == 1);
  CHECK(kernels.count(cache::Match::kNone) == 1);
  const TunedKernel& exact = kernels.get(norm, tuned_problem);
  CHECK(exact.chosen.config == tuned);
  CHECK(exact.chosen.source == "exact");
  CHECK(kernels.get(norm, near_problem).chosen.config == tuned);
  CHECK_THAT(kernels.get(norm, near_problem).chosen.source, Catch::StartsWith("nearest (distance"));
  CHECK(kernels.get(gate, gate_problem).chosen.config == gate.default_config(gate_problem));
  CHECK_THAT(kernels.get(gate, gate_problem).chosen.source, Catch::StartsWith("default"));
  CHECK_THROWS_AS(kernels.get(gate, tuned_problem), Error);
  // The prepared modules launch and match the reference.
  for (const auto& k : kernels.kernels())
    CHECK(test::run_through(*backend, *k.family, k.chosen.config, k.problem, *k.module) < 1e-5);
}

}  // namespace tuner_exec_backend_emu_test

namespace tuner_exec_backend_emu_test {

using namespace ktune;
using namespace ktune::tuner;

namespace {
struct Captured {
  std::unique_ptr<exec::Backend> backend = exec::make_emu_backend({2, "sm_80"});
  const templates::Family& family = templates::find_family("swiglu_fwd");
  templates::Problem problem = family.problem_classes().front();
  Config config = family.default_config(problem);
  std::shared_ptr<const exec::Module> module = backend->load(family.render(config, problem));
};
}  // namespace

TEST_CASE("exec: a graph captured under the emulation runs nothing until replayed, then reads memory as it is",
          "[emu][exec]") {
  Captured c;
  test::graph_through(*c.backend, c.family, c.config, c.problem, *c.module);
}

TEST_CASE("exec: under capture the emulation refuses what would wait for the device, and is usable after",
          "[emu][exec]") {
  Captured c;
  auto b = c.backend->allocate(64, "x");
  std::vector<float> host(16, 1.0f);
  const auto refused = [&](const std::function<void()>& inside, const char* call) {
    try {
      c.backend->capture(inside);
      FAIL("captured " << call);
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::kInternal);
      CHECK_THAT(e.what(), Catch::Contains(call) && Catch::Contains("while a graph is being captured"));
    }
  };
  refused([&] { c.backend->upload(*b, host.data(), 64); }, "upload");
  refused([&] { c.backend->download(host.data(), *b, 64); }, "download");
  refused([&] { c.backend->upload_range(*b, 4, host.data(), 4); }, "upload_range");
  refused([&] { c.backend->download_range(host.data(), *b, 4, 4); }, "download_range");
  refused([&] { c.backend->poison(*b); }, "poison");
  refused([&] { c.backend->synchronize(); }, "synchronize");
  refused([&] { c.backend->mark(); }, "synchronize");
  // The failed captures ended: copies run again.
  c.backend->upload(*b, host.data(), 64);
  std::vector<float> back(16, 0.0f);
  c.backend->download(back.data(), *b, 64);
  CHECK(back == host);
}

TEST_CASE("exec: host work enqueued under capture runs at replay, in order after the launches before it",
          "[emu][exec]") {
  Captured c;
  const auto w = c.family.make_workload(c.problem, 3);
  std::vector<std::unique_ptr<exec::Buffer>> buffers;
  std::vector<std::uint64_t> addresses;
  for (const auto& hb : w.buffers) {
    buffers.push_back(c.backend->allocate(hb.bytes.size(), hb.name));
    addresses.push_back(buffers.back()->address());
    if (hb.role == templates::Role::kInput) c.backend->upload(*buffers.back(), hb.bytes.data(), hb.bytes.size());
    else c.backend->poison(*buffers.back());
  }
  const auto& out = w.buffers.back();
  REQUIRE(out.role == templates::Role::kOutput);
  std::vector<std::byte> seen;
  int runs = 0;
  const auto plan = c.family.plan(c.config, c.problem, addresses, c.backend->device());
  const auto graph = c.backend->capture([&] {
    c.backend->launch(*c.module, plan);
    c.backend->enqueue_host([&] {
      ++runs;
      seen.resize(out.bytes.size());
      c.backend->download(seen.data(), *buffers.back(), seen.size());
    });
  });
  CHECK(runs == 0);
  CHECK(graph->nodes() == plan.size() + 1);
  c.backend->replay(*graph);
  CHECK(runs == 1);
  CHECK(templates::relative_l2(out.dtype, seen, out.expected) <= out.tolerance);
  // Replayed inside another capture, a graph joins it.
  const auto outer = c.backend->capture([&] { c.backend->replay(*graph); });
  CHECK(runs == 1);
  CHECK(outer->nodes() == graph->nodes());
  c.backend->replay(*outer);
  CHECK(runs == 2);
}

}  // namespace tuner_exec_backend_emu_test
