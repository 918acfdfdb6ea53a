// The execution seam on a GPU, the twin of backend_emu_test.cpp: a family's
// plan through the CUDA backend gives the CPU reference; a launch that cannot
// be resident is refused by the fit check before the driver sees it; tuned
// kernels from the cache service load and run. Skipped without a device.
#include "tuner/exec/backend.hpp"

#include <catch2/catch.hpp>

#include "support.hpp"
#include "tuner/exec/run_through.hpp"
#include "tuner/session/tuned_kernels.hpp"

using namespace ktune;
using namespace ktune::tuner;

TEST_CASE("exec: a family's plan through the CUDA backend gives its reference", "[gpu][exec]") {
  test::skip_without_gpu();
  auto backend = exec::make_cuda_backend();
  CHECK(backend->name() == "gpu");
  for (const char* name : {"rmsnorm_fwd", "swiglu_bwd", "cross_entropy_fwd", "attention_fwd", "attention_bwd"}) {
    const auto& family = templates::find_family(name);
    const auto problem = family.problem_classes().front();
    const Config config = family.default_config(problem);
    INFO(name << " " << problem.key());
    const auto module = backend->load(family.render(config, problem));
    CHECK(module->resources().size() == module->kernel_names().size());
    test::run_through(*backend, family, config, problem, *module);
  }
}

TEST_CASE("exec: the CUDA backend refuses a launch that cannot be resident", "[gpu][exec]") {
  test::skip_without_gpu();
  auto backend = exec::make_cuda_backend();
  const auto& family = templates::find_family("swiglu_fwd");
  const auto problem = family.problem_classes().front();
  const auto module = backend->load(family.render(family.default_config(problem), problem));
  templates::Launch l;
  l.block = {2048, 1, 1};
  std::vector<templates::Launch> plan;
  plan.push_back(l);
  CHECK_THROWS_WITH(backend->launch(*module, plan), Catch::StartsWith("does not fit: "));
}

TEST_CASE("tuned kernels on the CUDA backend: defaults load and run", "[gpu][exec]") {
  test::skip_without_gpu();
  auto backend = exec::make_cuda_backend();
  TunedKernels kernels(*backend, nullptr);
  std::vector<KernelRequest> requests;
  for (const char* name : {"rmsnorm_bwd", "rope_fwd", "adamw"}) {
    const auto& f = templates::find_family(name);
    requests.push_back({&f, f.problem_classes().front()});
  }
  kernels.prepare(requests);
  CHECK(kernels.count(cache::Match::kNone) == 3);
  for (const auto& k : kernels.kernels()) test::run_through(*backend, *k.family, k.chosen.config, k.problem, *k.module);
}

TEST_CASE("exec: an upload waits for the kernels launched before it on the CUDA backend's stream", "[gpu][exec]") {
  test::skip_without_gpu();
  auto backend = exec::make_cuda_backend();
  // y = x after spinning a few milliseconds: long enough for an upload that
  // did not wait to overwrite x while the kernel still has to read it.
  templates::Rendered source;
  source.source = R"(
__global__ void spin_copy(const float* x, float* y, int n, long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i];
}
)";
  source.kernels = {"spin_copy"};
  const auto module = backend->load(source);
  const int n = 4096;
  const std::vector<float> before(n, 1.0f), after(n, 2.0f);
  auto x = backend->allocate(n * sizeof(float), "x"), y = backend->allocate(n * sizeof(float), "y");
  backend->upload(*x, before.data(), n * sizeof(float));
  templates::Launch l;
  l.grid = {n / 256, 1, 1};
  l.block = {256, 1, 1};
  l.args.add(x->address()).add(y->address()).add(n).add(static_cast<long long>(50'000'000));  // ~25 ms
  std::vector<templates::Launch> plan;
  plan.push_back(l);
  backend->launch(*module, plan);
  backend->upload(*x, after.data(), n * sizeof(float));  // x's next contents, for a later launch
  std::vector<float> got(n);
  backend->download(got.data(), *y, n * sizeof(float));
  CHECK(got == before);
}
