// The C++ run-time API as a user gets it: `cmake --install` the build,
// build examples/runtime against the installed package (find_package(ktune),
// ktune::ktune), and run it emulated: the default config without a cache,
// the exact entry once `ktune tune` has filled one.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "base/files.hpp"
#include "spec/vector_add_run.hpp"
#include "support.hpp"
#include "spec/family_parameters_check.hpp"

namespace spec_runtime_emu_test {

namespace fs = std::filesystem;
using ktune::test::run_command;

TEST_CASE("spec emu: the runtime example builds against the installed package and runs", "[spec]") {
  const auto dir = ktune::test::scratch_dir("spec-install");
  const fs::path source(KTUNE_SOURCE_DIR), binary(KTUNE_BINARY_DIR);
  const std::string spec = (source / "examples/matmul/matmul.json").string();
  std::string out;
  REQUIRE(run_command("cmake --install " + binary.string() + " --prefix " + (dir / "prefix").string(), &out) == 0);
  CHECK(fs::exists(dir / "prefix/include/ktune/ktune.hpp"));
  INFO(out);
  // The library exports the API only: none of the internals or the libraries it carries (a program's own fmt
  // or nlohmann::json stays its own).
  std::string symbols;
  REQUIRE(run_command("nm -D --defined-only " + (dir / "prefix/lib/libktune.so").string() + " | c++filt", &symbols) ==
          0);
  CHECK_THAT(symbols, Catch::Contains("ktune::Runtime::kernel(") && Catch::Contains("typeinfo for ktune::Error"));
  for (const char* internal : {"nlohmann::", "fmt::", "mu::", "ktune::templates::", "ktune::tuner::", "State::"})
    CHECK_THAT(symbols, !Catch::Contains(internal));
  // The command that makes tuned caches comes with it, and runs from there.
  REQUIRE(run_command((dir / "prefix/bin/ktune").string() + " families", &out) == 0);
  CHECK_THAT(out, Catch::Contains("rmsnorm_fwd"));
  REQUIRE(run_command("cmake -S " + (source / "examples/runtime").string() + " -B " + (dir / "build").string() +
                          " -DCMAKE_PREFIX_PATH=" + (dir / "prefix").string() + " && cmake --build " +
                          (dir / "build").string(),
                      &out) == 0);
  const std::string example = (dir / "build/matmul_example").string();

  REQUIRE(run_command(example + " emu " + spec, &out) == 0);
  CHECK_THAT(out, Catch::Contains("tiled_matmul on "));
  CHECK_THAT(out, Catch::Contains("config {\"tile\":16,\"wpt\":2}, default"));
  CHECK_THAT(out, Catch::Contains(": PASS"));

  const std::string cache = (dir / "tuned.json").string();
  REQUIRE(run_command(ktune::test::ktune_exe().string() + " tune --backend emu --budget 3 --spec " + spec +
                          " --cache " + cache,
                      &out) == 0);
  REQUIRE(run_command(example + " emu " + spec + " " + cache, &out) == 0);
  CHECK_THAT(out, Catch::Contains(", exact"));
  CHECK_THAT(out, Catch::Contains(": PASS"));

  CHECK(run_command(example + " emu " + (dir / "missing.json").string(), &out) == 2);
  CHECK_THAT(out, Catch::Contains("no such spec file"));

  // Without CMake: pkg-config's flags, the library found at run time from where it was installed.
  const std::string pkg = "PKG_CONFIG_PATH=" + (dir / "prefix/lib/pkgconfig").string() + " pkg-config";
  const std::string main_cpp = (source / "examples/runtime/main.cpp").string();
  REQUIRE(run_command("c++ -o " + (dir / "pkg_example").string() + " " + main_cpp + " $(" + pkg +
                          " --cflags --libs ktune)",
                      &out) == 0);
  REQUIRE(run_command((dir / "pkg_example").string() + " emu " + spec, &out) == 0);
  CHECK_THAT(out, Catch::Contains(": PASS"));
}

TEST_CASE("spec emu: Kernel::launch on a caller's stream runs at once under the emulation", "[spec]") {
  ktune::Runtime rt("emu");
  CHECK(rt.stream() == 0);
  ktune::test::VectorAddRun run{rt, 1031};
  CHECK(run.kernel.not_stored().empty());  // the emulation's objects are kept
  for (const std::uint64_t stream : {std::uint64_t{0}, std::uint64_t{0x1234}}) {
    INFO("stream " << stream);
    run.poison_z();
    run.kernel.launch(run.buffers(), stream);
    const auto z = run.z();
    for (std::int64_t i = 0; i < run.n; ++i) REQUIRE(z[i] == run.x[i] + run.y[i]);
  }
}

TEST_CASE("spec emu: misuse of the run-time API is one runtime_error, never a crash", "[spec]") {
  const auto dir = ktune::test::scratch_dir("spec-runtime-misuse");
  std::optional<ktune::Kernel> kept;
  {
    ktune::Runtime rt("emu");
    // A size past the address space (it wrapped to one page, then an upload wrote past it).
    CHECK_THROWS_WITH(rt.allocate(SIZE_MAX), Catch::Contains("cannot map 18446744073709551615 bytes"));
    const std::uint64_t a = rt.allocate(64);
    CHECK_THROWS_WITH(rt.upload(a, nullptr, 64), Catch::Contains("upload of 64 bytes from a null host pointer"));
    CHECK_THROWS_WITH(rt.download(nullptr, a, 64), Catch::Contains("download of 64 bytes to a null host pointer"));
    // A spec path in any case is a spec, a folder is named as one, not as an unknown family.
    const fs::path example = fs::path(KTUNE_SOURCE_DIR) / "examples/vector_add";
    fs::copy_file(example / "vector_add.cu", dir / "vector_add.cu");
    fs::copy_file(example / "vector_add.json", dir / "VA.JSON");
    CHECK(rt.kernel((dir / "VA.JSON").string(), {"f32", {{"n", 100}}}).name() == "vector_add");
    CHECK_THROWS_WITH(rt.kernel(dir.string(), {"f32", {{"n", 100}}}), Catch::Contains("is a folder"));
    // What the emulation cannot run is named in one line before the host compiler sees it.
    std::ofstream(dir / "k.cu") << "__global__ void k(float* y) {\n  extern __shared__ float s[];\n  y[0] = s[0];\n}\n";
    std::ofstream(dir / "k.json") << R"({"name": "ext_shared", "source": "k.cu", "kernel": "k", "problem": {"n": 1},
      "tunables": {"t": [32]}, "grid": "1", "block": "t", "buffers": [{"name": "y", "count": "n", "role": "output"}],
      "args": ["y"], "reference": {"config": {"t": 32}}})";
    CHECK_THROWS_WITH(rt.kernel((dir / "k.json").string(), {"f32", {{"n", 1}}}),
                      Catch::Contains("the emulation cannot run this kernel: k.cu:2: extern __shared__"));
    kept = rt.kernel((dir / "VA.JSON").string(), {"f32", {{"n", 100}}});
    // A member kernel starts empty, says so when used, and takes one assigned.
    ktune::Kernel member;
    CHECK_THROWS_WITH(member.name(), Catch::Contains("an empty Kernel (made by its default constructor, or moved "
                                                     "from)"));
    CHECK_THROWS_WITH(member.launch({a}), Catch::Contains("an empty Kernel"));
    member = *kept;
    CHECK(member.name() == "vector_add");
  }
  // Its runtime gone, a kernel launches nothing: the memory and the module went with it.
  CHECK_THROWS_WITH(kept->launch({0x1000, 0x2000, 0x3000}), Catch::Contains("the Runtime it came from is destroyed"));
}

TEST_CASE("spec emu: a kernel lists its buffers and a launch into an allocation too small is refused", "[spec]") {
  ktune::Runtime rt("emu");
  ktune::test::VectorAddRun run{rt, 1031};
  const auto shapes = run.kernel.buffers();
  REQUIRE(shapes.size() == 3);
  CHECK(shapes[0].name == "x");
  CHECK(shapes[2].name == "z");
  CHECK(shapes[2].role == "output");
  CHECK(shapes[2].dtype == "f32");
  CHECK(shapes[2].bytes == 1031 * 4);
  // A launch never writes past a buffer it was given too small; nothing runs.
  const std::uint64_t small = rt.allocate(1030 * 4);
  CHECK_THROWS_WITH(run.kernel.launch({run.dx, run.dy, small}),
                    Catch::Contains("vector_add: buffer 3 ('z', f32 output) needs 4124 bytes, but the allocation at") &&
                        Catch::Contains("holds 4120"));
  CHECK_THROWS_WITH(run.kernel.launch({run.dx, run.dy + 4, run.dz}),
                    Catch::Contains("needs 4124 bytes, but only 4120 lie from the address given to the end of the "
                                    "allocation at") &&
                        Catch::Contains("(4124 bytes)"));
  // A null address is refused before the kernel faults on it (on a GPU, taking the context with it).
  CHECK_THROWS_WITH(run.kernel.launch({run.dx, 0, run.dz}),
                    Catch::Contains("vector_add: buffer 2 ('y', 4124 bytes) is the null address"));
  CHECK_THROWS_WITH(run.kernel.launch({run.dx, run.dy}), Catch::Contains("the spec has 3 (x, y, z)"));
  // Host memory is no device memory, under the emulation either.
  std::vector<float> host(1031);
  CHECK_THROWS_WITH(run.kernel.launch({run.dx, run.dy, reinterpret_cast<std::uint64_t>(host.data())}),
                    Catch::Contains("buffer 3 ('z') at") && Catch::Contains("is not inside an allocation"));
  run.poison_z();
  run.kernel.launch(run.buffers());
  CHECK(run.z()[1030] == run.x[1030] + run.y[1030]);
  // Copies of a part of an allocation: a tensor laid out in a larger one.
  std::vector<float> tail(31, NAN);
  rt.download(tail.data(), run.dz + 1000 * 4, tail.size() * 4);
  for (std::size_t i = 0; i < tail.size(); ++i) REQUIRE(tail[i] == run.x[1000 + i] + run.y[1000 + i]);
  const float one = 1.0f;
  rt.upload(run.dx + 7 * 4, &one, 4);
  rt.download(tail.data(), run.dx + 7 * 4, 4);
  CHECK(tail[0] == 1.0f);
  CHECK_THROWS_WITH(rt.download(tail.data(), run.dz + 1001 * 4, tail.size() * 4),
                    Catch::Contains("a download of 124 bytes at") && Catch::Contains("runs past the end"));
  CHECK_THROWS_WITH(rt.upload(0x10, &one, 4), Catch::Contains("0x10 is not inside an allocation"));

  // A built-in family's buffers: bf16 activations, fp32 weight and statistics; checked as a spec's are.
  const ktune::Kernel norm = rt.kernel("rmsnorm_fwd", {"bf16", {{"rows", 37}, {"dim", 96}}});
  const auto b = norm.buffers();
  REQUIRE(b.size() == 4);
  CHECK((b[0].name == "x" && b[0].dtype == "bf16" && b[0].bytes == 37 * 96 * 2 && b[0].role == "input"));
  CHECK((b[1].name == "w" && b[1].dtype == "f32" && b[1].bytes == 96 * 4));
  CHECK((b[3].name == "rstd" && b[3].dtype == "f32" && b[3].bytes == 37 * 4 && b[3].role == "output"));
  std::vector<std::uint64_t> addresses;
  for (const auto& buffer : b) addresses.push_back(rt.allocate(buffer.name == "w" ? 64 : buffer.bytes));
  CHECK_THROWS_WITH(norm.launch(addresses), Catch::Contains("buffer 2 ('w', f32 input) needs 384 bytes"));
}

TEST_CASE("spec emu: a built-in family's run-time scalars (AdamW's hyper-parameters and step, a scale, alpha) take "
          "their values at each launch", "[spec]") {
  ktune::Runtime rt("emu");
  ktune::test::check_family_parameters(rt, 1e-5);
}

TEST_CASE("spec emu: a kernel at a config other than the spec's default says why", "[spec]") {
  ktune::Runtime rt("emu");
  const std::string spec = (fs::path(KTUNE_SOURCE_DIR) / "examples/matmul/matmul.json").string();
  const ktune::Kernel k = rt.kernel(spec, {"f32", {{"m", 8}, {"n", 8}, {"k", 8}}});  // a 16-wide tile fits no 8
  CHECK(k.match() == ktune::Match::kDefault);
  CHECK_THAT(k.reason(), Catch::StartsWith("default (no tuned cache); the spec's default {\"tile\":16,\"wpt\":2} is "
                                           "not valid for this problem (") &&
                             Catch::EndsWith("), so the first valid point"));
  CHECK(rt.kernel(spec, {"f32", {{"m", 64}, {"n", 48}, {"k", 32}}}).reason() == "default (no tuned cache)");
}

TEST_CASE("spec emu: a spec's run-time parameters take their values at each launch", "[spec]") {
  const auto dir = ktune::test::scratch_dir("spec-runtime-parameters");
  std::ofstream(dir / "scale.cu") << "__global__ void scale(const float* x, float* y, float alpha, float beta, int n) "
                                     "{\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) y[i] = alpha * "
                                     "x[i] + beta;\n}\n";
  const auto write_spec = [&](const std::string& file, const std::string& parameters) {
    std::ofstream(dir / file) << R"json({"name": "scale_by", "source": "scale.cu", "kernel": "scale",
      "problem": {"n": 1000}, "tunables": {"block": [64, 128]}, "grid": "ceil_div(n, block)", "block": "block",
      "buffers": [{"name": "x", "count": "n"}, {"name": "y", "count": "n", "role": "output"}],
      "args": ["x", "y", {"type": "f32", "value": "alpha"}, {"type": "f32", "value": "beta"},
               {"type": "i32", "value": "n"}],
      "parameters": )json" << parameters
                                      << R"json(, "reference": {"config": {"block": 64}}})json";
    return (dir / file).string();
  };
  ktune::Runtime rt("emu");
  const ktune::Kernel k = rt.kernel(write_spec("scale.json", R"({"alpha": 2, "beta": 0})"), {"f32", {{"n", 1000}}});
  CHECK(k.parameters() == ktune::Parameters{{"alpha", 2.0}, {"beta", 0.0}});
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> x(1000), y(1000);
  for (auto& v : x) v = dist(rng);
  const std::uint64_t dx = rt.allocate(4000), dy = rt.allocate(4000);
  rt.upload(dx, x.data(), 4000);
  const auto run = [&](const ktune::Parameters& p) {
    const std::vector<unsigned char> poison(4000, 0xFF);
    rt.upload(dy, poison.data(), 4000);
    k.launch({dx, dy}, p);
    rt.download(y.data(), dy, 4000);
  };
  run({});
  for (std::size_t i = 0; i < x.size(); ++i) REQUIRE(y[i] == 2.0f * x[i]);
  run({{"alpha", 0.25}});  // beta keeps the spec's 0
  for (std::size_t i = 0; i < x.size(); ++i) REQUIRE(y[i] == 0.25f * x[i]);
  run({{"alpha", -3}, {"beta", 0.5}});
  for (std::size_t i = 0; i < x.size(); ++i) REQUIRE(y[i] == -3.0f * x[i] + 0.5f);
  CHECK_THROWS_WITH(k.launch({dx, dy}, {{"alpha", 1e300}}), Catch::Contains("past the range of f32"));
  CHECK_THROWS_WITH(k.launch({dx, dy}, {{"gamma", 1}}),
                    Catch::Contains("scale_by: no parameter 'gamma'; its parameters: alpha, beta"));
  CHECK_THROWS_WITH(rt.kernel("swiglu_fwd", {"f32", {{"n", 8}}}).launch({dx, dx, dy}, {{"alpha", 1}}),
                    Catch::Contains("swiglu_fwd takes no parameters"));
  // A parameter is no dimension or tunable, and has a value for checks.
  CHECK_THROWS_WITH(rt.kernel(write_spec("clash.json", R"({"n": 2})"), {"f32", {{"n", 1000}}}),
                    Catch::Contains("'n' is both a parameter and a problem dimension or tunable"));
  CHECK_THROWS_WITH(rt.kernel(write_spec("text.json", R"({"alpha": "two", "beta": 0})"), {"f32", {{"n", 1000}}}),
                    Catch::Contains("parameter 'alpha': its value in checks and tuning must be a finite number"));
}

TEST_CASE("spec emu: a launch that wrote past a buffer is reported once and the runtime goes on", "[spec]") {
  // 1001 floats end 12 bytes short of their page: the write one past the last lands in the padding, which a
  // canary fills. The next launches, correct ones, are judged by what they write themselves.
  const auto dir = ktune::test::scratch_dir("spec-runtime-overrun");
  std::ofstream(dir / "oob.cu") << "__global__ void oob(float* y, int n) {\n  int i = blockIdx.x * blockDim.x + "
                                   "threadIdx.x;\n  if (i <= n) y[i] = 1.0f;\n}\n";
  std::ofstream(dir / "oob.json") << R"json({"name": "past_the_end", "source": "oob.cu", "kernel": "oob",
    "problem": {"n": 1001}, "tunables": {"block": [64]}, "grid": "ceil_div(n + 1, block)", "block": "block",
    "buffers": [{"name": "y", "count": "n", "role": "output"}], "args": ["y", {"type": "i32", "value": "n"}],
    "reference": {"config": {"block": 64}}})json";
  ktune::Runtime rt("emu");
  const ktune::Kernel bad = rt.kernel((dir / "oob.json").string(), {"f32", {{"n", 1001}}});
  const std::uint64_t y = rt.allocate(1001 * 4);
  CHECK_THROWS_WITH(bad.launch({y}), Catch::Contains("out-of-bounds write") && Catch::Contains("oob"));
  ktune::test::VectorAddRun run{rt, 1031};
  for (int again = 0; again < 2; ++again) {
    run.poison_z();
    CHECK_NOTHROW(run.kernel.launch(run.buffers()));
    CHECK(run.z()[1030] == run.x[1030] + run.y[1030]);
  }
}

/// The index of the buffer named `name` in `k`'s launch order.
std::size_t index_of(const ktune::Kernel& k, const std::string& name) {
  const auto b = k.buffers();
  for (std::size_t i = 0; i < b.size(); ++i)
    if (b[i].name == name) return i;
  FAIL("kernel " << k.name() << " has no buffer " << name);
  return 0;
}

/// One allocation per buffer of `k`, zeroed.
std::vector<std::uint64_t> zeroed_buffers(ktune::Runtime& rt, const ktune::Kernel& k) {
  std::vector<std::uint64_t> out;
  for (const auto& b : k.buffers()) {
    out.push_back(rt.allocate(b.bytes));
    const std::vector<char> zeros(b.bytes, 0);
    rt.upload(out.back(), zeros.data(), zeros.size());
  }
  return out;
}

TEST_CASE("spec emu: a buffer a kernel writes may overlap another only where the family lets it work in place",
          "[spec]") {
  ktune::Runtime rt("emu");
  // AdamW's two moments in one buffer, or one shifted into the other: the first moment would be lost.
  const ktune::Kernel adamw = rt.kernel("adamw", {"f32", {{"tensors", 1}, {"numel", 1000}}});
  auto b = zeroed_buffers(rt, adamw);
  const std::size_t m = index_of(adamw, "exp_avg[0]"), v = index_of(adamw, "exp_avg_sq[0]");
  for (const auto& buffer : adamw.buffers()) CHECK(buffer.in_place_of.empty());
  const std::uint64_t v_address = b[v];
  b[v] = b[m];
  const std::string second = "adamw: buffer " + std::to_string(v + 1) + " ('exp_avg_sq[0]', inout) at";
  const std::string first = "overlaps buffer " + std::to_string(m + 1) + " ('exp_avg[0]'";
  CHECK_THROWS_WITH(adamw.launch(b), Catch::Contains(second) && Catch::Contains(first) &&
                                         Catch::Contains("give it memory of its own"));
  const std::uint64_t both = rt.allocate(8004);  // the two 4000 bytes apart by one float
  b[m] = both;
  b[v] = both + 4;
  CHECK_THROWS_WITH(adamw.launch(b), Catch::Contains("overlaps buffer"));
  b[m] = both + 4000 + 4;
  b[v] = both;
  adamw.launch(b);  // side by side in one allocation
  b[v] = v_address;
  adamw.launch(b);

  // cross_entropy_bwd writes dlogits over its logits, at the very same address only.
  const std::int64_t rows = 7, vocab = 33;
  const ktune::Kernel ce = rt.kernel("cross_entropy_bwd", {"f32", {{"rows", rows}, {"vocab", vocab}}});
  const std::size_t logits = index_of(ce, "logits"), dlogits = index_of(ce, "dlogits"), lse = index_of(ce, "lse");
  CHECK(ce.buffers()[dlogits].in_place_of == "logits");
  CHECK(ce.buffers()[logits].in_place_of.empty());
  auto c = zeroed_buffers(rt, ce);
  const std::vector<float> log_vocab(rows, std::log(static_cast<float>(vocab)));  // the lse of zero logits
  rt.upload(c[lse], log_vocab.data(), rows * 4);
  c[dlogits] = c[logits];
  ce.launch(c);
  std::vector<float> d(rows * vocab, NAN);
  rt.download(d.data(), c[logits], d.size() * 4);
  const double scale = ce.parameters().at("scale");  // targets 0: dlogits = scale * (1/vocab - [column 0])
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t j = 0; j < vocab; ++j)
      REQUIRE(d[r * vocab + j] == Approx(scale * (1.0 / vocab - (j == 0 ? 1.0 : 0.0))).epsilon(1e-5));
  const std::uint64_t shifted = rt.allocate(rows * vocab * 4 + 4);
  c[logits] = shifted;
  c[dlogits] = shifted + 4;
  CHECK_THROWS_WITH(ce.launch(c), Catch::Contains("'dlogits' may be written in place of 'logits' only at the very "
                                                  "same address"));

  // Inputs may share memory; an elementwise op's output may be its input.
  const ktune::Kernel add = rt.kernel("prim_add", {"f32", {{"rows", 3}, {"cols", 5}, {"b_rows", 3}, {"b_cols", 5}}});
  auto e = zeroed_buffers(rt, add);
  const std::vector<float> ones(15, 1.0f);
  rt.upload(e[0], ones.data(), 60);
  add.launch({e[0], e[0], e[2]});  // y = a + a
  add.launch({e[2], e[0], e[2]});  // y += a
  std::vector<float> y(15, NAN);
  rt.download(y.data(), e[2], 60);
  for (const float x : y) REQUIRE(x == 3.0f);
  // A broadcast b is read by many threads: the output may not be written over it.
  const ktune::Kernel row = rt.kernel("prim_add", {"f32", {{"rows", 3}, {"cols", 5}, {"b_rows", 1}, {"b_cols", 5}}});
  CHECK(row.buffers()[2].in_place_of == "a");
  const std::uint64_t big = rt.allocate(60);
  CHECK_THROWS_WITH(row.launch({big, big, big}), Catch::Contains("overlaps"));
}

TEST_CASE("spec emu: a relative spec path names the working folder's file at each call", "[spec]") {
  const auto dir = ktune::test::scratch_dir("spec-runtime-relative");
  const fs::path example = fs::path(KTUNE_SOURCE_DIR) / "examples/vector_add";
  for (const char* name : {"a", "b"}) {
    fs::create_directories(dir / name);
    fs::copy_file(example / "vector_add.cu", dir / name / "vector_add.cu");
    auto spec = nlohmann::json::parse(ktune::read_file(example / "vector_add.json"));
    spec["name"] = std::string("vector_add_") + name;
    std::ofstream(dir / name / "k.json") << spec.dump();
  }
  const fs::path before = fs::current_path();
  ktune::Runtime rt("emu");
  std::vector<std::string> names;
  try {
    for (const char* name : {"a", "b", "a"}) {
      fs::current_path(dir / name);
      names.push_back(rt.kernel("k.json", {"f32", {{"n", 100}}}).name());
    }
  } catch (...) {
    fs::current_path(before);
    throw;
  }
  fs::current_path(before);
  CHECK(names == std::vector<std::string>{"vector_add_a", "vector_add_b", "vector_add_a"});
  // The same file by another spelling is the same kernel.
  const auto a = rt.kernel((dir / "a/k.json").string(), {"f32", {{"n", 100}}});
  CHECK(a.name() == "vector_add_a");

  // A link to a spec reads the sources of its own folder, as `ktune tune --spec` does: here one that subtracts.
  fs::create_directories(dir / "link");
  fs::create_symlink(dir / "a/k.json", dir / "link/k.json");
  std::string source = ktune::read_file(example / "vector_add.cu");
  const std::string sum = "x[i + v] + y[i + v]";
  REQUIRE(source.find(sum) != std::string::npos);
  source.replace(source.find(sum), sum.size(), "x[i + v] - y[i + v]");
  std::ofstream(dir / "link/vector_add.cu") << source;
  auto linked = rt.kernel((dir / "link/k.json").string(), {"f32", {{"n", 100}}});
  const std::size_t bytes = 100 * sizeof(float);
  const std::vector<float> x(100, 3.0f), y(100, 1.0f);
  const std::uint64_t dx = rt.allocate(bytes), dy = rt.allocate(bytes), dz = rt.allocate(bytes);
  rt.upload(dx, x.data(), bytes);
  rt.upload(dy, y.data(), bytes);
  linked.launch({dx, dy, dz});
  rt.synchronize();
  std::vector<float> z(100);
  rt.download(z.data(), dz, bytes);
  CHECK(z[0] == 2.0f);
  CHECK(z[99] == 2.0f);
}

TEST_CASE("spec emu: a Runtime moves with its kernels, and errors say their kind", "[spec]") {
  static_assert(std::is_nothrow_move_constructible_v<ktune::Runtime>);
  static_assert(std::is_nothrow_move_assignable_v<ktune::Kernel>);
  ktune::Runtime first("emu");
  ktune::test::VectorAddRun run{first, 100};
  ktune::Runtime moved(std::move(first));  // run.rt is the one moved from: its memory is moved's now
  const std::vector<float> poison(100, NAN);
  moved.upload(run.dz, poison.data(), run.bytes);
  run.kernel.launch(run.buffers());
  std::vector<float> z(100);
  moved.download(z.data(), run.dz, run.bytes);
  CHECK(z[99] == run.x[99] + run.y[99]);
  CHECK(moved.backend() == "emu");
  try {
    (void)first.allocate(4);  // NOLINT(bugprone-use-after-move): what the test is about
    FAIL("a Runtime moved from allocated");
  } catch (const ktune::Error& e) {
    CHECK(e.kind() == ktune::ErrorKind::kInvalidInput);
    CHECK_THAT(e.what(), Catch::Contains("a Runtime moved from"));
  }
  ktune::Kernel taken = std::move(run.kernel);
  CHECK_THROWS_WITH(run.kernel.name(),  // NOLINT(bugprone-use-after-move)
                    Catch::Contains("an empty Kernel (made by its default constructor, or moved from)"));
  CHECK(taken.name() == "vector_add");
  CHECK_THROWS_WITH(ktune::Runtime("cuda"), Catch::Contains("is not one of gpu (the CUDA device 0, the model's "
                                                            "--backend cuda), gpu:N (device N), emu"));
  for (const char* bad : {"gpu:", "gpu:x", "gpu:-1", "gpu:1x", "gpu:99999", "gpu0", "GPU"}) {
    INFO(bad);
    try {
      ktune::Runtime gpu(bad);
      FAIL("a Runtime of backend " << bad);
    } catch (const ktune::Error& e) {
      CHECK(e.kind() == ktune::ErrorKind::kInvalidInput);
      // A number past any device's is said as such; the rest are not of the form.
      CHECK_THAT(e.what(), Catch::Contains(bad == std::string("gpu:99999") ? "no CUDA device has that number"
                                                                             : "gpu:N (device N)"));
    }
  }
  {
    const ktune::test::ScopedEnv no_device("KTUNE_NO_DEVICE", "1");
    for (const char* gpu_name : {"gpu", "gpu:0", "gpu:1"}) {
      INFO(gpu_name);
      try {
        ktune::Runtime gpu(gpu_name);
        FAIL("a GPU runtime with KTUNE_NO_DEVICE set");
      } catch (const ktune::Error& e) {
        CHECK(e.kind() == ktune::ErrorKind::kNoDevice);
        CHECK_THAT(e.what(), Catch::StartsWith("no CUDA device: KTUNE_NO_DEVICE is set") &&
                                 Catch::Contains("Runtime(\"emu\") runs kernels without one"));
      }
    }
  }
  CHECK_THROWS_WITH(moved.load_cache(""), Catch::Contains("load_cache: no tuned cache file given (an empty path)"));
}

TEST_CASE("spec emu: a family's name means the family whatever the working folder holds", "[spec]") {
  const auto dir = ktune::test::scratch_dir("spec-runtime-names");
  const fs::path before = fs::current_path();
  fs::create_directories(dir / "swiglu_fwd");  // a folder, and a file, named as families
  std::ofstream(dir / "rmsnorm_fwd") << "\x7f" "ELF";
  fs::current_path(dir);
  ktune::Runtime rt("emu");
  std::string swiglu, norm;
  try {
    swiglu = rt.kernel("swiglu_fwd", {"f32", {{"n", 100}}}).name();
    norm = rt.kernel("rmsnorm_fwd", {"f32", {{"rows", 3}, {"dim", 8}}}).name();
  } catch (...) {
    fs::current_path(before);
    throw;
  }
  fs::current_path(before);
  CHECK(swiglu == "swiglu_fwd");
  CHECK(norm == "rmsnorm_fwd");
}

TEST_CASE("spec emu: Runtime::tune tunes a problem the cache lacks and keeps the winner for the next run",
          "[spec]") {
  const auto dir = ktune::test::scratch_dir("spec-runtime-tune");
  // The session logs under a cache folder of this test's own: read below, the default log of the problem in the
  // suite's would be the other schedule's run of this test too, which may start a session there meanwhile.
  const auto cache_dir = ktune::test::own_cache_dir("spec-runtime-tune-cache");
  const ktune::test::ScopedEnv own_cache("KTUNE_CACHE_DIR", cache_dir.c_str());
  const std::string spec = (fs::path(KTUNE_SOURCE_DIR) / "examples/vector_add/vector_add.json").string();
  const std::string cache = (dir / "tuned.json").string();
  const ktune::ProblemSize problem{"f32", {{"n", 1031}}};
  ktune::TuneSettings how;
  how.cache_file = cache;
  {
    ktune::Runtime rt("emu");
    // Bad settings are refused before any work: nothing written.
    ktune::TuneSettings bad = how;
    bad.strategy = "annealing-ish";
    CHECK_THROWS_WITH(rt.tune(spec, problem, bad), Catch::Contains("annealing-ish"));
    bad = how;
    bad.budget = "soon";
    CHECK_THROWS_WITH(rt.tune(spec, problem, bad), Catch::Contains("soon"));
    CHECK_FALSE(fs::exists(cache));

    CHECK(rt.kernel(spec, problem).match() == ktune::Match::kDefault);
    how.budget = "3";
    const ktune::Kernel tuned = rt.tune(spec, problem, how);
    CHECK(tuned.match() == ktune::Match::kExact);
    CHECK_THAT(tuned.reason(), Catch::StartsWith("exact (tuned now: ") && Catch::Contains(" configs measured in "));
    // This runtime's later requests get the winner, and it computes x + y.
    const ktune::Kernel again = rt.kernel(spec, problem);
    CHECK(again.match() == ktune::Match::kExact);
    CHECK(again.config() == tuned.config());
    ktune::test::VectorAddRun run{rt, 1031};
    run.poison_z();
    tuned.launch(run.buffers());
    const auto z = run.z();
    for (std::int64_t i = 0; i < run.n; ++i) REQUIRE(z[i] == run.x[i] + run.y[i]);
  }
  // A kernel no config of which computes the reference's answer: the error says the first failure and where
  // the rest are.
  std::ofstream(dir / "two.cu") << "__global__ void right(float* y, int n) {\n"
                                   "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) y[i] = 1.0f;\n}\n"
                                   "__global__ void wrong(float* y, int n) {\n"
                                   "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) y[i] = 2.0f;\n}\n";
  std::ofstream(dir / "wrong.json") << R"json({"name": "always_wrong", "source": "two.cu", "kernel": "wrong",
    "problem": {"n": 100}, "tunables": {"block": [32, 64]}, "grid": "ceil_div(n, block)", "block": "block",
    "buffers": [{"name": "y", "count": "n", "role": "output"}], "args": ["y", {"type": "i32", "value": "n"}],
    "reference": {"kernel": "right", "config": {"block": 32}}})json";
  {
    ktune::Runtime rt("emu");
    ktune::TuneSettings all;
    all.strategy = "exhaustive";
    all.budget = "10";
    CHECK_THROWS_WITH(rt.tune((dir / "wrong.json").string(), {"f32", {{"n", 100}}}, all),
                      Catch::Contains("tuning always_wrong on f32;n=100: none of the 2 configs measured ran correctly "
                                      "(the first, {\"block\":32}: validation: y relative L2 error") &&
                          Catch::Contains("`ktune log show ") && Catch::Contains(" --spec ") &&
                          Catch::Contains("` lists why each failed"));
  }
  // The next run finds it in the file.
  ktune::Runtime next("emu");
  next.load_cache(cache);
  const ktune::Kernel k = next.kernel(spec, problem);
  CHECK(k.match() == ktune::Match::kExact);
  CHECK(k.reason() == "exact");
  // A problem nobody tuned takes the nearest tuned shape, or, asked, the default.
  CHECK(next.kernel(spec, {"f32", {{"n", 4000}}}).match() == ktune::Match::kNearest);
  next.load_cache(cache, /*nearest=*/false);
  const ktune::Kernel other = next.kernel(spec, {"f32", {{"n", 4000}}});
  CHECK(other.match() == ktune::Match::kDefault);
  CHECK(other.reason() == "default (no exact entry; nearest shapes not taken)");
  CHECK(next.kernel(spec, problem).match() == ktune::Match::kExact);
  // The file's entry competes in a later tune into it, its cache never loaded: measured beside the default.
  auto doc = nlohmann::json::parse(ktune::read_file(cache));
  REQUIRE(doc.at("entries").size() == 1);
  doc["entries"][0]["config"] = {{"block", 1024}, {"vec", 1}};
  std::ofstream(cache) << doc.dump();
  ktune::Runtime later("emu");
  ktune::TuneSettings one = how;
  one.budget = "1";  // the default alone, then what the file holds
  const std::string reason = later.tune(spec, problem, one).reason();
  const auto at = reason.find("session log ");
  REQUIRE(at != std::string::npos);
  const std::string log_path = reason.substr(at + 12, reason.size() - at - 13);
  CHECK_THAT(log_path, Catch::StartsWith((cache_dir / "sessions").string()));
  const std::string log = ktune::read_file(log_path);
  CHECK_THAT(log, Catch::Contains(R"("config":{"block":1024,"vec":1})"));
}

TEST_CASE("spec emu: Runtime::tune keeps the file's better entry that did not compete, as ktune tune --cache does",
          "[spec]") {
  const auto dir = ktune::test::scratch_dir("spec-runtime-tune-kept");
  const auto cache_dir = ktune::test::own_cache_dir("spec-runtime-tune-kept-cache");
  const ktune::test::ScopedEnv own_cache("KTUNE_CACHE_DIR", cache_dir.c_str());
  const std::string spec = (fs::path(KTUNE_SOURCE_DIR) / "examples/vector_add/vector_add.json").string();
  const fs::path file = dir / "tuned.json", loaded = dir / "loaded.json";
  const ktune::ProblemSize problem{"f32", {{"n", 1031}}};
  ktune::TuneSettings how;
  how.cache_file = file.string();
  how.budget = "2";
  {
    ktune::Runtime rt("emu");
    rt.tune(spec, problem, how);
  }
  // The runtime loads a copy; the file's own entry then measured far faster, as by a longer session elsewhere.
  fs::copy_file(file, loaded);
  auto doc = nlohmann::json::parse(ktune::read_file(file));
  REQUIRE(doc["entries"].size() == 1);
  for (const char* k : {"time_ms", "p20_ms", "p80_ms"}) doc["entries"][0][k] = 1e-6;
  std::ofstream(file) << doc.dump(1);
  const auto best = doc["entries"][0]["config"];

  ktune::Runtime rt("emu");
  rt.load_cache(loaded.string());  // its entry competes in the session; the file's did not
  how.budget = "1";
  const ktune::Kernel tuned = rt.tune(spec, problem, how);
  CHECK_THAT(tuned.reason(), Catch::Contains(file.string() + " keeps its entry " + best.dump() +
                                             " at 0.0000 ms, which this session did not measure"));
  const auto after = nlohmann::json::parse(ktune::read_file(file));
  REQUIRE(after["entries"].size() == 1);
  CHECK(after["entries"][0]["config"] == best);
  CHECK(after["entries"][0]["time_ms"] == 1e-6);

  // Loaded from the file itself, its entry is the one that competed: the winner, timed beside it, replaces it.
  ktune::Runtime same("emu");
  same.load_cache(file.string());
  const ktune::Kernel retuned = same.tune(spec, problem, how);
  CHECK_THAT(retuned.reason(), !Catch::Contains(" keeps its entry "));
  const auto replaced = nlohmann::json::parse(ktune::read_file(file));
  REQUIRE(replaced["entries"].size() == 1);
  CHECK(replaced["entries"][0]["time_ms"] != 1e-6);
}

}  // namespace spec_runtime_emu_test
