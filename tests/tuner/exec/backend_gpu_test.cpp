// The execution seam on a GPU, the twin of backend_emu_test.cpp: a family's
// plan through the CUDA backend gives the CPU reference; a launch that cannot
// be resident is refused by the fit check before the driver sees it; tuned
// kernels from the cache service load and run; a backend outlives another
// made on its thread; a CUDA graph replays what it captured, and a capture the
// driver refuses leaves the stream usable; a measurement names another ktune
// process on the GPU.
// Skipped without a device.
#include "tuner/exec/backend.hpp"

#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <fstream>

#include "base/env.hpp"
#include "base/error.hpp"
#include "support.hpp"
#include "tuner/compile/compiler.hpp"
#include "tuner/cuda/device.hpp"
#include "tuner/cuda/gpu_neighbour.hpp"
#include "tuner/exec/run_through.hpp"
#include "tuner/session/tuned_kernels.hpp"

namespace tuner_exec_backend_gpu_test {

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

// Three families' first problem classes, to prepare at their defaults.
std::vector<KernelRequest> default_requests() {
  std::vector<KernelRequest> requests;
  for (const char* name : {"rmsnorm_bwd", "rope_fwd", "adamw"}) {
    const auto& f = templates::find_family(name);
    requests.push_back({&f, f.problem_classes().front()});
  }
  return requests;
}

TEST_CASE("tuned kernels on the CUDA backend: defaults load and run", "[gpu][exec]") {
  test::skip_without_gpu();
  auto backend = exec::make_cuda_backend();
  TunedKernels kernels(*backend, nullptr);
  const auto requests = default_requests();
  kernels.prepare(requests);
  CHECK(kernels.count(cache::Match::kNone) == 3);
  for (const auto& k : kernels.kernels()) test::run_through(*backend, *k.family, k.chosen.config, k.problem, *k.module);
}

TEST_CASE("tuned kernels on the CUDA backend with a binary cache that cannot be written compile each kernel once",
          "[gpu][exec]") {
  test::skip_without_gpu();
  const auto dir = test::scratch_dir("gpu-unwritable-cubin");
  std::ofstream(dir / "cubin") << "a file where the cache's folder would be";
  const test::ScopedEnv cache_dir("KTUNE_CACHE_DIR", dir.c_str());
  auto backend = exec::make_cuda_backend();
  TunedKernels kernels(*backend, nullptr);
  const auto requests = default_requests();
  const auto before = not_stored_so_far().compiles;
  kernels.prepare(requests);
  // Compiled on the workers, not kept, and loaded from what they compiled: not compiled again one by one.
  CHECK(not_stored_so_far().compiles - before == 3);
  for (const auto& k : kernels.kernels()) test::run_through(*backend, *k.family, k.chosen.config, k.problem, *k.module);
}

TEST_CASE("exec: a CUDA backend goes on working on its thread after another made there is destroyed", "[gpu][exec]") {
  test::skip_without_gpu();
  // Two runtimes of a program (or a test) share the device's primary context: the one destroyed first leaves it
  // current for the other, whose modules, memory, copies and launches go on.
  auto survivor = exec::make_cuda_backend();
  const std::vector<float> values(1000, 3.0f);
  auto kept = survivor->allocate(values.size() * sizeof(float), "kept");
  { const auto other = exec::make_cuda_backend(); }
  survivor->upload(*kept, values.data(), values.size() * sizeof(float));
  TunedKernels kernels(*survivor, nullptr);
  kernels.prepare(default_requests());
  for (const auto& k : kernels.kernels())
    test::run_through(*survivor, *k.family, k.chosen.config, k.problem, *k.module);
  std::vector<float> got(values.size());
  survivor->download(got.data(), *kept, got.size() * sizeof(float));
  CHECK(got == values);
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

TEST_CASE("exec: a kernel with static shared memory gets the dynamic shared memory that takes it past 48 KB",
          "[gpu][exec]") {
  test::skip_without_gpu();
  auto backend = exec::make_cuda_backend();
  // 40 KB static and 16 KB dynamic: each under 48 KB, together above it, so
  // the launch needs the opt-in as much as a 56 KB dynamic one would.
  templates::Rendered source;
  source.source = R"(
__global__ void static_and_dynamic(const float* x, float* y) {
  __shared__ float fixed[10240];
  extern __shared__ float extra[];
  for (int i = threadIdx.x; i < 10240; i += blockDim.x) fixed[i] = x[i];
  for (int i = threadIdx.x; i < 4096; i += blockDim.x) extra[i] = x[10240 + i];
  __syncthreads();
  for (int i = threadIdx.x; i < 10240; i += blockDim.x) y[i] = fixed[10239 - i] + 1.0f;
  for (int i = threadIdx.x; i < 4096; i += blockDim.x) y[10240 + i] = extra[4095 - i] + 1.0f;
}
)";
  source.kernels = {"static_and_dynamic"};
  const auto module = backend->load(source);
  REQUIRE(module->resources().front().static_smem_bytes == 40960);
  const int n = 10240 + 4096;
  std::vector<float> x(n);
  for (int i = 0; i < n; ++i) x[i] = static_cast<float>(i);
  auto dx = backend->allocate(n * sizeof(float), "x"), dy = backend->allocate(n * sizeof(float), "y");
  backend->upload(*dx, x.data(), n * sizeof(float));
  backend->poison(*dy);
  templates::Launch l;
  l.block = {256, 1, 1};
  l.dynamic_smem = 4096 * sizeof(float);
  l.args.add(dx->address()).add(dy->address());
  std::vector<templates::Launch> plan;
  plan.push_back(l);
  backend->launch(*module, plan);
  std::vector<float> got(n);
  backend->download(got.data(), *dy, n * sizeof(float));
  CHECK(got[0] == 10240.0f);
  CHECK(got[10239] == 1.0f);
  CHECK(got[10240] == static_cast<float>(n));
  CHECK(got[n - 1] == 10241.0f);
}

}  // namespace tuner_exec_backend_gpu_test

namespace tuner_exec_backend_gpu_test {

using namespace ktune;
using namespace ktune::tuner;

TEST_CASE("exec: a CUDA graph runs nothing until replayed, then reads memory as it is", "[gpu][exec]") {
  test::skip_without_gpu();
  auto backend = exec::make_cuda_backend();
  const auto& family = templates::find_family("swiglu_fwd");
  const auto problem = family.problem_classes().front();
  const Config config = family.default_config(problem);
  const auto module = backend->load(family.render(config, problem));
  test::graph_through(*backend, family, config, problem, *module);
}

TEST_CASE("exec: a capture the driver refuses fails as kCuda and leaves the stream usable", "[gpu][exec]") {
  test::skip_without_gpu();
  auto backend = exec::make_cuda_backend();
  try {
    backend->capture([&] { backend->synchronize(); });
    FAIL("a synchronize was captured");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kCuda);
  }
  const auto& family = templates::find_family("swiglu_fwd");
  const auto problem = family.problem_classes().front();
  const Config config = family.default_config(problem);
  const auto module = backend->load(family.render(config, problem));
  CHECK(test::run_through(*backend, family, config, problem, *module) < 1e-5);
}

TEST_CASE("exec: a CUDA backend's measurement names another ktune process marked on its GPU, and one alone none",
          "[gpu][exec]") {
  test::skip_without_gpu();
  const auto cache_dir = test::scratch_dir("exec-gpu-marks");
  const test::ScopedEnv cache("KTUNE_CACHE_DIR", cache_dir.c_str());
  // Marks of its own: the machine's folder holds those of every ktune process on the GPU (other tests run beside).
  const test::ScopedEnv marks("KTUNE_GPU_MARK_DIR", (cache_dir / "marks").c_str());
  auto backend = tuner::exec::make_cuda_backend();
  tuner::RunOptions options;
  options.max_repetitions = options.min_repetitions = 3;
  options.min_seconds = 0;
  CHECK(backend->time([] {}, options, "nothing").shared_with.empty());
  test::GpuNeighbour other(env::gpu_mark_dir(), tuner::list_devices()[0].uuid, true);
  const auto m = backend->time([] {}, options, "nothing");
  REQUIRE(m.shared_with.size() == 1);
  CHECK_THAT(m.shared_with[0], Catch::StartsWith(fmt::format("pid {} (", other.pid)));
  other.kill();
  CHECK(backend->time([] {}, options, "nothing").shared_with.empty());
}

}  // namespace tuner_exec_backend_gpu_test
