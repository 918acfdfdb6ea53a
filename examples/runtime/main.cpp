// The tiled matmul of examples/matmul through ktune's run-time API: the
// tuned config for this shape (exact, nearest or default, with the reason),
// compiled on first use, launched on random inputs and checked against a
// CPU matmul in double precision.
//   matmul_example <gpu|emu> <matmul.json> [tuned.json]
#include <ktune/ktune.hpp>

#include <cmath>
#include <cstdio>
#include <exception>
#include <random>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s <gpu|emu> <matmul.json> [tuned.json]\n", argv[0]);
    return 2;
  }
  try {
    const int m = 64, n = 48, k = 32;
    ktune::Runtime rt(argv[1]);
    if (argc > 3) rt.load_cache(argv[3]);
    const ktune::Kernel kernel = rt.kernel(argv[2], {"f32", {{"m", m}, {"n", n}, {"k", k}}});
    std::printf("%s on %s (%s): config %s, %s\n", kernel.name().c_str(), rt.device().c_str(), rt.backend().c_str(),
                kernel.config().c_str(), kernel.reason().c_str());
    if (!kernel.not_stored().empty())
      std::fprintf(stderr, "warning: the compile was not cached (%s); the next run compiles it again\n",
                   kernel.not_stored().c_str());

    std::mt19937 rng(5);
    std::uniform_real_distribution<float> dist(-1.f, 1.f);
    std::vector<float> a(m * k), b(k * n), c(m * n, NAN);  // (m, k), (k, n), (m, n)
    for (auto& x : a) x = dist(rng);
    for (auto& x : b) x = dist(rng);
    const std::uint64_t da = rt.allocate(a.size() * 4), db = rt.allocate(b.size() * 4), dc = rt.allocate(c.size() * 4);
    rt.upload(da, a.data(), a.size() * 4);
    rt.upload(db, b.data(), b.size() * 4);
    rt.upload(dc, c.data(), c.size() * 4);  // NaN: an element the kernel misses fails the check
    kernel.launch({da, db, dc});
    rt.synchronize();
    rt.download(c.data(), dc, c.size() * 4);

    double num = 0, den = 0;
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        double want = 0;
        for (int l = 0; l < k; ++l) want += static_cast<double>(a[i * k + l]) * b[l * n + j];
        num += (c[i * n + j] - want) * (c[i * n + j] - want);
        den += want * want;
      }
    const double error = std::sqrt(num / den);
    const bool ok = error < 1e-5;  // NaN fails too
    std::printf("relative L2 error vs fp64 CPU matmul: %.3g: %s\n", error, ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "matmul_example: %s\n", e.what());
    return 2;
  }
}
