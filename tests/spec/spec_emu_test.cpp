// Kernel specs tuned and run end to end on the emulation backend: the
// examples' winners land in the tuned cache under the spec's source hash,
// every valid point is evaluated, the reference kernel's answers match an
// fp64 CPU computation, and a wrong answer is rejected.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/files.hpp"
#include "spec/args_mismatch_check.hpp"
#include "spec/constant_check.hpp"
#include "spec/spec_family.hpp"
#include "support.hpp"
#include "tuner/run/recording_backend.hpp"
#include "tuner/run/emu_runner.hpp"

namespace spec_spec_emu_test {

namespace fs = std::filesystem;
using ktune::Config;
using ktune::test::ktune_exe;
using ktune::test::run_command;

namespace {

fs::path example(const std::string& name) { return fs::path(KTUNE_SOURCE_DIR) / "examples" / name; }

std::vector<float> floats_of(const std::vector<std::byte>& bytes) {
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), bytes.size());
  return v;
}

double relative_l2(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / den);
}

/// A .npy file of fp32 values (format 1.0, C order).
void write_npy(const fs::path& path, const std::vector<float>& values) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(values.size()) + ",), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  out.write("\x93NUMPY\x01\x00", 8);
  const std::uint16_t len = static_cast<std::uint16_t>(header.size());
  out.put(static_cast<char>(len & 0xff)).put(static_cast<char>(len >> 8));
  out << header;
  out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size() * 4));
}

/// Tunes `spec` exhaustively on the emulation; returns the --json result. The session logs beside `cache`: the
/// cache folder's default log of the problem is another test's too, which may start anew there meanwhile.
nlohmann::json tune(const fs::path& spec, const fs::path& cache, int expected_rc = 0) {
  std::string out;
  const int rc = run_command(ktune_exe().string() + " --json tune --backend emu --strategy exhaustive --spec " +
                                 spec.string() + " --cache " + cache.string() + " --log " +
                                 fs::path(cache).replace_extension(".log").string(),
                             &out);
  INFO(out);
  REQUIRE(rc == expected_rc);
  // Progress lines come first (stderr is captured too); the result is the JSON object after them.
  const auto start = out.rfind("\n{\n");
  return rc == 0 ? nlohmann::json::parse(out.substr(start == std::string::npos ? 0 : start + 1)) : nlohmann::json();
}

/// A .safetensors file holding one fp32 tensor called `name`.
void write_safetensors(const fs::path& path, const std::string& name, const std::vector<float>& values) {
  const std::string header =
      nlohmann::json{{name, {{"dtype", "F32"}, {"shape", {values.size()}}, {"data_offsets", {0, values.size() * 4}}}}}
          .dump();
  std::ofstream out(path, std::ios::binary);
  const std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
  out << header;
  out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size() * 4));
}

/// The vector_add example's spec in a scratch folder `name`, its kernel's body `body`; returns the spec's path.
std::string vector_add_with(const std::string& name, const std::string& body) {
  const auto dir = ktune::test::scratch_dir(name);
  fs::copy_file(example("vector_add/vector_add.json"), dir / "vector_add.json");
  std::ofstream(dir / "vector_add.cu") << "template <int VEC>\n"
                                          "__global__ void vector_add(const float* x, const float* y, float* z, "
                                          "int n) {\n"
                                       << body << "}\n";
  return (dir / "vector_add.json").string();
}

/// Runs `ktune run --backend emu` on a spec of one i32 buffer in, one out (n = 32, one block of 32) whose source,
/// `name`.cu in a scratch folder `folder`, holds kernel `name` and its reference `name`_reference; its exit status,
/// its output in *out.
int run_i32_spec(const std::string& folder, const std::string& name, const std::string& source, std::string* out) {
  const auto dir = ktune::test::scratch_dir(folder);
  std::ofstream(dir / (name + ".cu")) << source;
  std::ofstream(dir / (name + ".json")) << fmt::format(R"json({{"name": "{0}", "source": "{0}.cu", "kernel": "{0}",
    "dtypes": ["i32"], "problem": {{"n": 32}}, "tunables": {{"b": [32]}}, "grid": "1", "block": "b",
    "buffers": [{{"name": "x", "count": "n", "role": "input", "dtype": "i32"}},
                {{"name": "y", "count": "n", "role": "output", "dtype": "i32"}}],
    "args": ["x", "y", {{"type": "i32", "value": "n"}}], "reference": {{"kernel": "{0}_reference"}}}})json",
                                                       name);
  return run_command(ktune_exe().string() + " run --backend emu --spec " + (dir / (name + ".json")).string(), out);
}

}  // namespace

TEST_CASE("spec emu: the tiled matmul tunes end to end and lands in the cache", "[spec]") {
  const auto dir = ktune::test::scratch_dir("spec-tune-matmul");
  const auto& family = ktune::spec::load_spec_family(example("matmul/matmul.json"));
  const auto result = tune(example("matmul/matmul.json"), dir / "tuned.json");
  CHECK(result["family"] == "tiled_matmul");
  CHECK(result["evaluations"] == 11);  // every valid point (spec_test counts them), no more
  CHECK(result["failures"] == 0);
  // What the text row shows is in the JSON too: how the session ended, and what the winner rule judged.
  CHECK(result["stopped_by"] == "space exhausted (all 11 valid configs measured)");
  CHECK(result["pruned"] == 0);
  CHECK(result["tied"].get<int>() >= 1);
  CHECK(result["default_config"] == nlohmann::json({{"tile", 16}, {"wpt", 2}}));
  CHECK(result["default_time_ms"].get<double>() > 0);
  REQUIRE(result["finalists"].size() >= 2);  // the three fastest and the default, timed again side by side
  CHECK(std::any_of(result["finalists"].begin(), result["finalists"].end(),
                    [&](const nlohmann::json& f) { return f["config"] == result["best_config"]; }));
  CHECK_THAT(result["method"].get<std::string>(), Catch::Contains("timed again beside the other finalists"));
  CHECK(result["compile_seconds"].get<double>() >= 0);
  CHECK(result["compile_seconds"].get<double>() <= result["seconds"].get<double>());
  std::ifstream in(dir / "tuned.json");
  const auto cache = nlohmann::json::parse(in);
  REQUIRE(cache["entries"].size() == 1);
  const auto& key = cache["entries"][0]["key"];
  CHECK(key["family"] == "tiled_matmul");
  CHECK(key["source_hash"] == family.source_hash());
  CHECK(cache["entries"][0]["config"] == result["best_config"]);
  // The session log reads back with the spec; without it, the message says what to give.
  const std::string log = result["log"].get<std::string>();
  std::string out;
  CHECK(run_command(ktune_exe().string() + " log show " + log + " --spec " + example("matmul/matmul.json").string(),
                    &out) == 0);
  CHECK_THAT(out, Catch::Contains("{\"tile\":"));
  CHECK(run_command(ktune_exe().string() + " log show " + log, &out) == 2);
  CHECK_THAT(out, Catch::Contains("not a built-in family: give its kernel spec with --spec"));
}

TEST_CASE("spec emu: the row-sum reduction tunes end to end and lands in the cache", "[spec]") {
  const auto dir = ktune::test::scratch_dir("spec-tune-reduction");
  const auto& family = ktune::spec::load_spec_family(example("reduction/reduction.json"));
  const auto result = tune(example("reduction/reduction.json"), dir / "tuned.json");
  CHECK(result["evaluations"] == 12);
  CHECK(result["failures"] == 0);
  std::ifstream in(dir / "tuned.json");
  const auto cache = nlohmann::json::parse(in);
  REQUIRE(cache["entries"].size() == 1);
  CHECK(cache["entries"][0]["key"]["family"] == "row_sum");
  CHECK(cache["entries"][0]["key"]["source_hash"] == family.source_hash());
  // cache show --spec tells the entry current against the spec's source now, and stale once the source changed;
  // prune --stale --spec drops it then.
  fs::copy_file(example("reduction/reduction.json"), dir / "reduction.json");
  fs::copy_file(example("reduction/reduction.cu"), dir / "reduction.cu");
  const std::string show = ktune_exe().string() + " --json cache show " + (dir / "tuned.json").string();
  const auto source = [&](const std::string& args) {
    std::string out;
    REQUIRE(run_command(show + args, &out) == 0);
    return nlohmann::json::parse(out).at(0).at("source").get<std::string>();
  };
  CHECK(source("") == "-");
  CHECK(source(" --spec " + (dir / "reduction.json").string()) == "current");
  std::ofstream(dir / "reduction.cu", std::ios::app) << "// edited\n";
  CHECK(source(" --spec " + (dir / "reduction.json").string()) == "stale");
  std::string out;
  REQUIRE(run_command(ktune_exe().string() + " cache prune --stale --spec " + (dir / "reduction.json").string() + " " +
                          (dir / "tuned.json").string(),
                      &out) == 0);
  CHECK_THAT(out, Catch::Contains(": 1 entry dropped"));
}

TEST_CASE("spec emu: reference answers match an fp64 CPU computation, variants match them", "[spec]") {
  const auto& family = ktune::spec::load_spec_family(example("matmul/matmul.json"));
  const ktune::templates::Problem problem{"f32", {{"k", 32}, {"m", 32}, {"n", 16}}};
  const auto w = family.make_workload(problem, 7);
  REQUIRE(w.buffers.size() == 3);
  const auto a = floats_of(w.buffers[0].bytes), b = floats_of(w.buffers[1].bytes);
  std::vector<double> c(32 * 16);
  for (int i = 0; i < 32; ++i)
    for (int j = 0; j < 16; ++j)
      for (int l = 0; l < 32; ++l) c[i * 16 + j] += static_cast<double>(a[i * 32 + l]) * b[l * 16 + j];
  CHECK(relative_l2(floats_of(w.buffers[2].expected), c) < 1e-6);

  auto runner = ktune::tuner::make_emu_runner();
  for (const auto& config : {Config({{"tile", 8}, {"wpt", 2}}), Config({{"tile", 16}, {"wpt", 4}})}) {
    const auto r = runner->run(family, config, problem, {});
    INFO(config.str() << ": " << r.failure);
    CHECK(r.ok);
    CHECK(r.max_error < 1e-6);
  }
}

TEST_CASE("spec emu: answer files are checked, and a wrong answer is rejected", "[spec]") {
  const auto dir = ktune::test::scratch_dir("spec-answer");
  fs::copy_file(example("reduction/reduction.cu"), dir / "reduction.cu");
  const int rows = 4, cols = 256;
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> x(rows * cols), right(rows), wrong(rows);
  for (auto& v : x) v = dist(rng);
  for (int r = 0; r < rows; ++r) {
    double s = 0;
    for (int c = 0; c < cols; ++c) s += x[r * cols + c];
    right[r] = static_cast<float>(s);
    wrong[r] = static_cast<float>(s) + (r == 2 ? 0.5f : 0.0f);  // one row off
  }
  write_npy(dir / "x.npy", x);
  write_npy(dir / "right.npy", right);
  write_npy(dir / "wrong.npy", wrong);
  write_safetensors(dir / "right.safetensors", "y", right);
  auto write_spec = [&](const std::string& answer) {
    std::ifstream in(example("reduction/reduction.json"));
    auto j = nlohmann::json::parse(in);
    j["problem"] = {{"rows", rows}, {"cols", cols}};
    j["buffers"][0]["init"] = "file";
    j["buffers"][0]["file"] = "x.npy";
    j["reference"] = {{"files", {{"y", answer}}}};
    const auto path = dir / ("spec-" + answer + ".json");
    std::ofstream(path) << j.dump(2);
    return path;
  };
  std::string out;
  CHECK(run_command(ktune_exe().string() + " run --backend emu --spec " + write_spec("right.npy").string(), &out) == 0);
  CHECK_THAT(out, Catch::Contains("PASS"));
  CHECK(run_command(ktune_exe().string() + " run --backend emu --spec " + write_spec("right.safetensors").string(),
                    &out) == 0);
  CHECK_THAT(out, Catch::Contains("PASS"));
  const auto wrong_spec = write_spec("wrong.npy");
  CHECK(run_command(ktune_exe().string() + " run --backend emu --spec " + wrong_spec.string(), &out) == 1);
  CHECK_THAT(out, Catch::Contains("FAIL: validation"));
  tune(wrong_spec, dir / "tuned.json", 1);
  CHECK_FALSE(fs::exists(dir / "tuned.json"));
  // An output's own tolerance, in place of the spec's: one row off by 0.5 in four is within 1 of relative L2.
  auto loose = nlohmann::json::parse(std::ifstream(wrong_spec));
  loose["buffers"][1]["tolerance"] = 1.0;
  std::ofstream(dir / "loose.json") << loose.dump(2);
  CHECK(run_command(ktune_exe().string() + " run --backend emu --spec " + (dir / "loose.json").string(), &out) == 0);
  loose["buffers"][0]["tolerance"] = 1.0;  // an input's is refused: it is not checked
  std::ofstream(dir / "loose.json") << loose.dump(2);
  CHECK(run_command(ktune_exe().string() + " run --backend emu --spec " + (dir / "loose.json").string(), &out) == 2);
  CHECK_THAT(out, Catch::Contains("buffer 'x': an input is not checked, so it takes no tolerance"));
}

TEST_CASE("spec emu: a kernel the emulation cannot run is refused with the construct named", "[spec]") {
  const auto dir = ktune::test::scratch_dir("spec-gap-cli");
  fs::copy_file(example("reduction/reduction.json"), dir / "reduction.json");
  std::ofstream(dir / "reduction.cu") << "template <int THREADS, int VEC>\n"
                                         "__global__ void row_sum(const float* x, float* y, int cols) {\n"
                                         "  extern __shared__ float partial[];\n"
                                         "  y[blockIdx.x] = partial[0];\n}\n";
  std::string out;
  CHECK(run_command(ktune_exe().string() + " run --backend emu --spec " + (dir / "reduction.json").string(),
                    &out) == 2);
  CHECK_THAT(out, Catch::Contains("reduction.cu:3: extern __shared__"));
}

TEST_CASE("spec emu: a fault in a spec's kernel names its line in the spec's source file", "[spec]") {
  // Thread 5 divides by zero; the line tables hold the source under the name its #line marker gives.
  std::string out;
  CHECK(run_i32_spec("spec-fault-line", "divide",
                     "__global__ void divide(const int* x, int* y, int n) {\n"
                     "  const int i = threadIdx.x; volatile int d = i != 5;\n"
                     "  if (i < n) y[i] = 100 / d;\n"
                     "}\n"
                     "__global__ void divide_reference(const int* x, int* y, int n) {\n"
                     "  if (threadIdx.x < n) y[threadIdx.x] = 100;\n"
                     "}\n",
                     &out) == 1);
  CHECK_THAT(out, Catch::Contains("arithmetic exception (integer division by zero?) in kernel divide, block (0,0,0), "
                                  "thread (5,0,0) at divide.cu:3"));
}

TEST_CASE("spec emu: a fault inside the C library names no line of it as the kernel's", "[spec]") {
  // printf of a string at an address no buffer holds faults in the C library's strlen, whose line tables (where
  // it has them) hold paths like ./string/string-inlines.c.
  std::string out;
  CHECK(run_i32_spec("spec-fault-libc", "copy",
                     "__global__ void copy(const int* x, int* y, int n) {\n"
                     "  if (threadIdx.x == 0) printf(\"%s\\n\", reinterpret_cast<const char*>(64));\n"
                     "}\n"
                     "__global__ void copy_reference(const int* x, int* y, int n) {\n"
                     "  if (threadIdx.x < n) y[threadIdx.x] = x[threadIdx.x];\n"
                     "}\n",
                     &out) == 1);
  CHECK_THAT(out, Catch::Contains("in kernel copy, block (0,0,0), thread (0,0,0)"));
  const std::size_t at = out.find("thread (0,0,0) at ");
  if (at != std::string::npos) CHECK(out.compare(at + 18, 8, "copy.cu:") == 0);
}

TEST_CASE("spec emu: restore_inouts times an in-place kernel from its inputs as uploaded (Triton's restore_value)",
          "[spec]") {
  const auto dir = ktune::test::scratch_dir("spec-restore-inouts");
  // A kernel that may run only on inputs as uploaded (values in [-1, 1)), and moves them out of that range.
  std::ofstream(dir / "bump.cu") << R"cu(
template <int BLOCK>
__global__ void bump(float* y, int n) {
  const int i = blockIdx.x * BLOCK + threadIdx.x;
  if (i >= n) return;
  assert(y[i] < 100.0f);
  y[i] += 1000.0f;
}
__global__ void bump_reference(float* y, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] += 1000.0f;
}
)cu";
  nlohmann::json j = nlohmann::json::parse(R"json({"name": "bump", "source": "bump.cu", "kernel": "bump<{block}>",
    "problem": {"n": 300}, "tunables": {"block": [64]}, "grid": "ceil_div(n, block)", "block": "block",
    "buffers": [{"name": "y", "count": "n", "role": "inout"}], "args": ["y", {"type": "i32", "value": "n"}],
    "reference": {"kernel": "bump_reference", "grid": 1, "block": 64}, "restore_inouts": true})json");
  std::ofstream(dir / "restored.json") << j.dump();
  const auto result = tune(dir / "restored.json", dir / "restored-tuned.json");
  CHECK(result["failures"] == 0);
  CHECK_THAT(result["method"].get<std::string>(), Catch::Contains("in-place buffers restored before each, untimed"));
  // Without it, the timed launches run on what the check's launch left, as Kernel Tuner's do: here a trap.
  j.erase("restore_inouts");
  std::ofstream(dir / "plain.json") << j.dump();
  std::string out;
  CHECK(run_command(ktune_exe().string() + " tune --backend emu --strategy exhaustive --spec " +
                        (dir / "plain.json").string() + " --cache " + (dir / "plain-tuned.json").string() +
                        " --log " + (dir / "plain.log").string() + " 2>&1",
                    &out) != 0);
  CHECK_THAT(out, Catch::Contains("y[i] < 100.0f"));
  // A spec with no inout buffer has nothing to restore.
  j["restore_inouts"] = true;
  j["buffers"][0]["role"] = "output";
  std::ofstream(dir / "none.json") << j.dump();
  CHECK(run_command(ktune_exe().string() + " render --space --spec " + (dir / "none.json").string() + " 2>&1",
                    &out) == 2);
  CHECK_THAT(out, Catch::Contains("'restore_inouts' restores the buffers of role inout"));
}

TEST_CASE("spec emu: a problem of integers runs and is checked exactly, with no tolerance to give", "[spec]") {
  const auto dir = ktune::test::scratch_dir("spec-integer-problem");
  std::ofstream(dir / "twice.cu") << R"cu(
template <class T, int BLOCK>
__global__ void twice(T* y, const T* x, int n) {
  const int i = blockIdx.x * BLOCK + threadIdx.x;
  if (i < n) y[i] = x[i] * 2;
}
template <class T>
__global__ void twice_reference(T* y, const T* x, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = x[i] + x[i];
}
)cu";
  nlohmann::json j = nlohmann::json::parse(R"json({"name": "twice", "source": "twice.cu",
    "kernel": "twice<{dtype}, {block}>", "dtypes": ["i32", "f32"], "problem": {"n": 1000},
    "tunables": {"block": [64, 128]}, "grid": "ceil_div(n, block)", "block": "block",
    "buffers": [{"name": "y", "count": "n", "role": "output"}, {"name": "x", "count": "n"}],
    "args": ["y", "x", {"type": "i32", "value": "n"}],
    "reference": {"kernel": "twice_reference<{dtype}>", "grid": 1, "block": 64}})json");
  std::ofstream(dir / "twice.json") << j.dump();
  std::string out;
  const std::string run = ktune_exe().string() + " run --backend emu --spec " + (dir / "twice.json").string();
  CHECK(run_command(run + " --problem '{\"dtype\":\"i32\",\"dims\":{\"n\":1000}}' 2>&1", &out) == 0);
  CHECK_THAT(out, Catch::Contains("PASS"));
  // One element past the problem's end left unwritten is a wrong integer, named.
  j["grid"] = "ceil_div(n - 1, block)";
  j["problem"]["n"] = 1025;
  std::ofstream(dir / "short.json") << j.dump();
  CHECK(run_command(ktune_exe().string() + " run --backend emu --spec " + (dir / "short.json").string() +
                        " --problem '{\"dtype\":\"i32\",\"dims\":{\"n\":1025}}' --config '{\"block\":64}' 2>&1",
                    &out) == 1);
  CHECK_THAT(out, Catch::Contains("integers differ from the reference's (integers are compared exactly, or within an "
                                  "atol given)"));
}

TEST_CASE("spec emu: CUDA's wrapping atomics, conversions, funnel shifts, halving adds and warp matches run as "
          "CUDA documents them",
          "[spec]") {
  const auto dir = ktune::test::scratch_dir("spec-intrinsics");
  // One warp; lane 0 writes each result as two 16-bit halves, so every value is exact in fp32.
  std::ofstream(dir / "probe.cu") << R"cu(
#include "kt.cuh"
__device__ void put(float* out, int& k, unsigned v) {
  out[k++] = static_cast<float>(v & 0xffffu);
  out[k++] = static_cast<float>(v >> 16);
}
__global__ void probe(float* out) {
  __shared__ unsigned counter;
  const unsigned lane = threadIdx.x;
  const unsigned any = __match_any_sync(0xffffffffu, lane % 3);
  int pred = 0;
  const unsigned all = __match_all_sync(0xffffffffu, 7, &pred);
  const unsigned some = __match_all_sync(0xffffffffu, lane < 5, &pred);
  if (lane != 0) return;
  int k = 0;
  put(out, k, any);
  put(out, k, all);
  put(out, k, some);
  counter = 0;
  for (int i = 0; i < 4; ++i) put(out, k, atomicInc(&counter, 2));
  put(out, k, counter);
  counter = 0;
  put(out, k, atomicDec(&counter, 3));
  put(out, k, atomicDec(&counter, 3));
  put(out, k, counter);
  const float halves[] = {2.5f, 3.5f, -2.5f};
  for (float h : halves) put(out, k, static_cast<unsigned>(__float2int_rn(h)));
  put(out, k, static_cast<unsigned>(__float2int_rz(-2.7f)));
  put(out, k, static_cast<unsigned>(__float2int_rd(-2.2f)));
  put(out, k, static_cast<unsigned>(__float2int_ru(2.2f)));
  put(out, k, __float2uint_rn(-1.0f));
  put(out, k, static_cast<unsigned>(__float2int_rn(1e20f)));
  put(out, k, static_cast<unsigned>(__float2int_rn(__int_as_float(0x7fc00000))));
  put(out, k, __funnelshift_l(0x80000001u, 0x1u, 1));
  put(out, k, __funnelshift_r(0x4u, 0x1u, 33));
  put(out, k, __funnelshift_lc(0x5u, 0x9u, 40));
  put(out, k, static_cast<unsigned>(__hadd(2147483647, 1)));
  put(out, k, static_cast<unsigned>(__rhadd(1, 2)));
  put(out, k, __uhadd(0xffffffffu, 1u));
  put(out, k, __sad(-3, 4, 10u));
  put(out, k, __usad(3u, 10u, 1u));
  unsigned cached = 0;
  __stcg(&cached, __ldcg(&counter));
  put(out, k, cached);
  out[k++] = sinpif(0.5f);
  out[k++] = cospif(1.0f);
  // Half and bf16 arithmetic, not the integer halving add of the same name.
  out[k++] = __half2float(__hadd(__float2half(1.5f), __float2half(2.25f)));
  out[k++] = __bfloat162float(__hmul(__float2bfloat16(1.5f), __float2bfloat16(-2.0f)));
}
)cu";
  std::vector<unsigned> words;
  unsigned thirds = 0;
  for (unsigned l = 0; l < 32; l += 3) thirds |= 1u << l;
  words = {thirds, 0xffffffffu, 0u,                        // match any, all (equal), all (not)
           0u, 1u, 2u, 0u, 1u,                             // atomicInc to 2: wraps to 0 past it; the counter
           0u, 3u, 2u,                                     // atomicDec from 0: to the limit, then down
           2u, 4u, static_cast<unsigned>(-2),              // ties to even
           static_cast<unsigned>(-2), static_cast<unsigned>(-3), 3u, 0u,  // rz, rd, ru; a negative to unsigned
           0x7fffffffu, 0u,                                // saturated; NaN
           3u, 0x80000002u, 5u,                            // funnel shifts (the shift mod 32; clamped to 32)
           0x40000000u, 2u, 0x80000000u, 17u, 8u,          // halving adds without overflow; |x - y| + z
           2u};                                            // a cache-hinted load and store
  std::vector<float> answer;
  for (unsigned w : words) {
    answer.push_back(static_cast<float>(w & 0xffffu));
    answer.push_back(static_cast<float>(w >> 16));
  }
  for (const float v : {1.0f, -1.0f, 3.75f, -3.0f}) answer.push_back(v);
  write_npy(dir / "answer.npy", answer);
  nlohmann::json j = {{"name", "probe"}, {"source", "probe.cu"}, {"kernel", "probe"},
                      {"problem", {{"n", static_cast<int>(answer.size())}}}, {"tunables", {{"t", {32}}}},
                      {"grid", 1}, {"block", "t"}, {"tolerance", 0},
                      {"buffers", {{{"name", "out"}, {"count", "n"}, {"role", "output"}}}},
                      {"args", {"out"}}, {"reference", {{"files", {{"out", "answer.npy"}}}}}};
  std::ofstream(dir / "probe.json") << j.dump(2);
  std::string out;
  CHECK(run_command(ktune_exe().string() + " run --backend emu --spec " + (dir / "probe.json").string() + " 2>&1",
                    &out) == 0);
  INFO(out);
  CHECK_THAT(out, Catch::Contains("PASS"));
}

TEST_CASE("spec emu: a kernel NVRTC refuses, or whose shared memory no GPU block holds, fails under the emulation "
          "too",
          "[spec]") {
  const auto dir = ktune::test::scratch_dir("spec-nvrtc-under-emu");
  fs::copy_file(example("vector_add/vector_add.json"), dir / "vector_add.json");
  const std::string run = ktune_exe().string() + " run --backend emu --spec " + (dir / "vector_add.json").string();
  // vector_add with `body` inside its loop over the thread's elements, after the lines `before` it.
  const auto write_kernel = [&](const std::string& before, const std::string& body) {
    std::ofstream(dir / "vector_add.cu") << "template <int VEC>\n"
                                            "__global__ void vector_add(const float* x, const float* y, float* z, "
                                            "int n) {\n"
                                            "  const int i = (blockIdx.x * blockDim.x + threadIdx.x) * VEC;\n"
                                         << before << "  for (int v = 0; v < VEC; ++v)\n    if (i + v < n) " << body
                                         << "\n}\n";
  };
  std::string out;
  // The host compiler knows std::min (its headers are there); NVRTC does not.
  write_kernel("", "z[i + v] = std::min(x[i + v] + y[i + v], 1e30f);");
  CHECK(run_command(run + " 2>&1", &out) == 1);
  CHECK_THAT(out, Catch::Contains("FAIL: compile: NVRTC for sm_90") && Catch::Contains("\"std\" has no member"));
  // 64 KB of static shared memory: the emulation has room, a GPU block 48 KB.
  write_kernel("  __shared__ float big[16384];\n  big[threadIdx.x] = 0.0f;\n",
               "z[i + v] = x[i + v] + y[i + v] + big[threadIdx.x];");
  CHECK(run_command(run + " 2>&1", &out) == 1);
  CHECK_THAT(out, Catch::Contains("FAIL: compile: NVRTC for sm_90") && Catch::Contains("too much shared data"));
}

TEST_CASE("spec emu: run --timeout ends a variant that hangs as a FAIL after the line naming it", "[spec]") {
  const std::string spec = vector_add_with("spec-run-timeout", "  volatile int spin = 1;\n  while (spin) {}\n");
  std::string out;
  CHECK(run_command(ktune_exe().string() + " run --backend emu --timeout 3 --spec " + spec + " 2>&1", &out) == 1);
  INFO(out);
  CHECK_THAT(out, Catch::StartsWith("vector_add ") && Catch::Contains("\nFAIL: timeout: no result within 3 s"));
  CHECK(run_command(ktune_exe().string() + " run --backend emu --timeout 0 --spec " + spec, &out) == 2);
}

TEST_CASE("spec emu: a worker ended by --timeout takes its host compiler with it", "[spec]") {
  // A kernel whose host compile takes long: constexpr loops the emulation's compiler evaluates, eight of them,
  // each within its limit of operations.
  const auto dir = ktune::test::scratch_dir("spec-timeout-compile");
  std::ofstream(dir / "slow.cu") << R"cu(
constexpr unsigned long long spin(int outer) {
  unsigned long long s = 0;
  for (int i = 0; i < outer; ++i)
    for (int j = 0; j < 200000; ++j) s += (unsigned long long)i * j ^ s;
  return s;
}
__global__ void slow(float* out) {
#ifdef KT_EMULATION
  constexpr unsigned long long k = spin(3000) + spin(3001) + spin(3002) + spin(3003) + spin(3004) + spin(3005) +
                                   spin(3006) + spin(3007);
#else
  const unsigned long long k = 0;
#endif
  out[threadIdx.x] = (float)(k & 1);
}
)cu";
  std::ofstream(dir / "slow.json") << R"json({"name": "slow", "source": "slow.cu", "kernel": "slow",
    "problem": {"n": 32}, "tunables": {"t": [1]}, "grid": "1", "block": "32",
    "buffers": [{"name": "out", "count": "n", "role": "output"}], "args": ["out"],
    "reference": {"config": {"t": 1}}})json";
  const auto cache = dir / "cache";  // in every compile's command line, as its output's folder
  std::string out;
  // The run ends at its timeout: a compiler left running would hold its output open until it finished.
  const auto start = std::chrono::steady_clock::now();
  CHECK(run_command("KTUNE_CACHE_DIR=" + cache.string() + " " + ktune_exe().string() +
                        " run --backend emu --timeout 2 --spec " + (dir / "slow.json").string() + " 2>&1",
                    &out) != 0);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(8));
  // The folder as a pattern that its own command line (the shell running pgrep) does not match.
  const std::string pattern = "'[" + cache.string().substr(0, 1) + "]" + cache.string().substr(1) + "'";
  std::string left;
  for (int i = 0; i < 20; ++i) {  // a second for the kill to land
    run_command("pgrep -f " + pattern + " || true", &left);
    if (left.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(left.empty());
  run_command("pkill -KILL -f " + pattern + " || true", &out);  // none left for the tests after this one
}

TEST_CASE("spec emu: ldmatrix rows and cp.async destinations outside 16-byte aligned shared memory fail, as on a "
          "GPU",
          "[spec]") {
  const auto dir = ktune::test::scratch_dir("spec-ldmatrix-shared");
  // 8 rows of 16 bf16 padded by PAD (PAD 4: rows 40 bytes apart, not 16-byte aligned); GLOBAL 1: the row
  // addresses point into global memory; COPY 1: a cp.async whose destination is global memory.
  std::ofstream(dir / "ldm.cu") << R"cu(#include "kt.cuh"
template <int PAD, int GLOBAL, int COPY>
__global__ void ldm(const __nv_bfloat16* x, float* out) {
  constexpr int S = 16 + PAD;
  __shared__ __align__(16) __nv_bfloat16 tile[8 * S];
  const unsigned lane = threadIdx.x;
  for (int i = lane; i < 8 * 16; i += 32) tile[i / 16 * S + i % 16] = x[i];
  if (COPY && lane == 0) {
    kt::cp_async_16(out + 60, x);
    kt::cp_async_commit();
    kt::cp_async_wait_all();
  }
  __syncwarp();
  const __nv_bfloat16* row = GLOBAL ? x + (lane % 8) * 16 : tile + (lane % 8) * S;
  unsigned d[1];
  kt::ldmatrix_x1(d, row);
  out[2 * lane] = __bfloat162float(__ushort_as_bfloat16(d[0] & 0xffff));
  out[2 * lane + 1] = __bfloat162float(__ushort_as_bfloat16(d[0] >> 16));
}
)cu";
  std::ofstream(dir / "ldm.json") << R"json({"name": "ldm", "source": "ldm.cu",
    "kernel": "ldm<{pad}, {global}, {copy}>",
    "dtypes": ["bf16"], "problem": {"n": 128}, "tunables": {"pad": [0, 4, 8], "global": [0, 1], "copy": [0, 1]},
    "grid": "1", "block": "32",
    "buffers": [{"name": "x", "count": "n", "role": "input"},
                {"name": "out", "count": "64", "dtype": "f32", "role": "output", "tolerance": 1e-6}],
    "args": ["x", "out"], "reference": {"config": {"pad": 0, "global": 0, "copy": 0}}})json";
  const auto run = [&](const std::string& config, std::string& out) {
    return run_command(ktune_exe().string() + " run --backend emu --spec " + (dir / "ldm.json").string() +
                           " --config '" + config + "' 2>&1",
                       &out);
  };
  std::string out;
  CHECK(run(R"({"pad": 8, "global": 0, "copy": 0})", out) == 0);  // 16 bytes of padding keep rows aligned
  CHECK_THAT(out, Catch::Contains("PASS"));
  CHECK(run(R"({"pad": 4, "global": 0, "copy": 0})", out) == 1);
  CHECK_THAT(out, Catch::Contains("ldmatrix row address") && Catch::Contains("from lane 1 is not 16-byte aligned"));
  CHECK(run(R"({"pad": 0, "global": 1, "copy": 0})", out) == 1);
  CHECK_THAT(out, Catch::Contains("from lane 0 is not in the block's shared memory"));
  CHECK(run(R"({"pad": 0, "global": 0, "copy": 1})", out) == 1);
  CHECK_THAT(out, Catch::Contains("cp.async of 16 bytes to") && Catch::Contains("not in the block's shared memory"));
}

TEST_CASE("spec emu: a reference that fails ends the run or the session at once: nothing can be checked", "[spec]") {
  // The reference's config (vec 1) traps; every other config would run.
  const std::string spec = vector_add_with("spec-reference-fails",
                                           "  if (VEC == 1) __trap();\n"
                                           "  const int i = (blockIdx.x * blockDim.x + threadIdx.x) * VEC;\n"
                                           "  for (int v = 0; v < VEC; ++v)\n"
                                           "    if (i + v < n) z[i + v] = x[i + v] + y[i + v];\n");
  const auto dir = fs::path(spec).parent_path();
  std::string out;
  CHECK(run_command(ktune_exe().string() + " run --backend emu --spec " + spec + " --config '{\"vec\":2}' 2>&1",
                    &out) == 2);
  INFO(out);
  CHECK_THAT(out, Catch::Contains(spec + ": the reference vector_add<1> at {\"block\":256,\"vec\":1} failed, so "
                                  "no variant can be checked against it: emulation: __trap() called"));
  const auto cache = dir / "tuned.json";
  CHECK(run_command("KTUNE_PRINT=quiet " + ktune_exe().string() + " tune --backend emu --strategy exhaustive --spec " +
                        spec + " --cache " + cache.string() + " --log " + (dir / "s.log").string() + " 2>&1",
                    &out) == 2);
  CHECK_THAT(out, Catch::Contains("no variant can be checked against it"));
  CHECK_FALSE(fs::exists(cache));
}

TEST_CASE("spec emu: args that are not the kernel's parameters are named, not read as other bytes", "[spec]") {
  ktune::test::check_args_mismatch("emu", "spec-args-mismatch");
}

TEST_CASE("spec emu: {dtype} and a define of dtype give one source the problem's element type", "[spec]") {
  const auto dir = ktune::test::scratch_dir("spec-dtype");
  std::ofstream(dir / "twice.cu") << R"cu(#include "kt.cuh"
template <class T, int BLOCK>
__global__ void twice(const T* x, T* y, int n) {
  static_assert(sizeof(ELEM) == sizeof(T), "ELEM is the problem's element type");
  const int i = blockIdx.x * BLOCK + threadIdx.x;
  if (i < n) y[i] = kt::from_float<T>(2.0f * kt::to_float(x[i]));
}
template <class T>
__global__ void twice_reference(const T* x, T* y, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = kt::from_float<T>(kt::to_float(x[i]) + kt::to_float(x[i]));
}
)cu";
  std::ofstream(dir / "twice.json")
      << R"json({"name": "twice", "source": "twice.cu", "kernel": "twice<{dtype}, {block}>",
    "dtypes": ["f32", "bf16", "f16"], "defines": {"ELEM": "dtype"}, "problem": {"n": 1000},
    "tunables": {"block": [64, 128]}, "grid": "ceil_div(n, block)", "block": "block",
    "buffers": [{"name": "x", "count": "n"}, {"name": "y", "count": "n", "role": "output"}],
    "args": ["x", "y", {"type": "i32", "value": "n"}],
    "reference": {"kernel": "twice_reference<{ dtype }>", "grid": "1", "block": "32", "config": {"block": 64}}})json";
  const std::string spec = (dir / "twice.json").string();
  for (const auto& [dtype, type] : {std::pair{"f32", "float"}, {"bf16", "__nv_bfloat16"}, {"f16", "__half"}}) {
    INFO(dtype);
    const std::string problem = fmt::format(R"( --problem '{{"dtype":"{}","dims":{{"n":1003}}}}')", dtype);
    std::string out;
    REQUIRE(run_command(ktune_exe().string() + " render --spec " + spec + problem + " --config '{\"block\":128}'",
                        &out) == 0);
    CHECK_THAT(out, Catch::Contains(fmt::format("#define ELEM {}\n", type)) &&
                        Catch::Contains(fmt::format("twice<{}, 128>", type)));
    CHECK(run_command(ktune_exe().string() + " run --backend emu --spec " + spec + problem, &out) == 0);
    CHECK_THAT(out, Catch::Contains("PASS"));
  }
  // 'dtype' is the element type's name alone.
  nlohmann::json clash = nlohmann::json::parse(std::ifstream(dir / "twice.json"));
  clash["tunables"]["dtype"] = {1, 2};
  std::ofstream(dir / "clash.json") << clash.dump();
  std::string out;
  CHECK(run_command(ktune_exe().string() + " render --space --spec " + (dir / "clash.json").string(), &out) == 2);
  CHECK_THAT(out, Catch::Contains("'dtype' is the problem's element type"));
}

TEST_CASE("spec emu: define_tunables runs a Kernel Tuner kernel unchanged, its tune parameters as macros",
          "[spec]") {
  const auto dir = ktune::test::scratch_dir("spec-define-tunables");
  // Kernel Tuner's vector_add with a tile of outputs per thread: block_size_x and tile_size_x are macros it
  // writes ahead of the source, with kernel_tuner, the block's other axes and the grid's; its kernels' defaults
  // for a build outside it stand under #ifndef kernel_tuner.
  std::ofstream(dir / "vector_add.cu") << R"cu(
#ifndef kernel_tuner
#define tile_size_x 16
#endif
__global__ void vector_add(float* c, const float* a, const float* b, int n) {
  const int block = blockIdx.x + blockIdx.y * grid_size_x;
  const int i0 = (block * block_size_x * block_size_y * block_size_z + threadIdx.x) * tile_size_x;
  for (int t = 0; t < tile_size_x; ++t)
    if (i0 + t < n) c[i0 + t] = a[i0 + t] + b[i0 + t];
}
)cu";
  nlohmann::json j = nlohmann::json::parse(R"json({"name": "vector_add", "source": "vector_add.cu",
    "kernel": "vector_add", "define_tunables": true, "problem": {"n": 1001},
    "tunables": {"block_size_x": [32, 64, 128], "tile_size_x": [1, 2, 4]},
    "restrictions": ["32 <= block_size_x * tile_size_x <= 256"],
    "grid": "ceil_div(n, block_size_x * tile_size_x)", "block": "block_size_x",
    "buffers": [{"name": "c", "count": "n", "role": "output"}, {"name": "a", "count": "n"},
                {"name": "b", "count": "n"}],
    "args": ["c", "a", "b", {"type": "i32", "value": "n"}],
    "reference": {"config": {"block_size_x": 32, "tile_size_x": 1}}})json");
  std::ofstream(dir / "vector_add.json") << j.dump();
  const std::string spec = (dir / "vector_add.json").string();
  std::string out;
  REQUIRE(run_command(ktune_exe().string() + " render --spec " + spec +
                          " --config '{\"block_size_x\":64,\"tile_size_x\":4}' 2>&1",
                      &out) == 0);
  CHECK_THAT(out, Catch::Contains("#define block_size_x 64\n#define tile_size_x 4\n"));
  CHECK_THAT(out, Catch::Contains("#define kernel_tuner 1\n#define grid_size_x 4\n#define grid_size_y 1\n"
                                  "#define block_size_y 1\n#define grid_size_z 1\n#define block_size_z 1\n"));
  CHECK(run_command(ktune_exe().string() + " run --backend emu --spec " + spec +
                        " --config '{\"block_size_x\":64,\"tile_size_x\":4}' 2>&1",
                    &out) == 0);
  CHECK_THAT(out, Catch::Contains("PASS"));
  // Without it, the kernel names what it lacks; a define of a tunable's name beside it is refused.
  j.erase("define_tunables");
  std::ofstream(dir / "plain.json") << j.dump();
  CHECK(run_command(ktune_exe().string() + " run --backend emu --spec " + (dir / "plain.json").string() + " 2>&1",
                    &out) != 0);
  CHECK_THAT(out, Catch::Contains("block_size_x"));
  // A reference of its own launch (its config off the tunables' lists): the macros are its launch's, and the
  // tuned grid, not whole there, is not asked for.
  j["define_tunables"] = true;
  std::ofstream(dir / "vector_add.cu", std::ios::app) << R"cu(
__global__ void vector_add_ref(float* c, const float* a, const float* b, int n) {
  for (int i = blockIdx.x * block_size_x + threadIdx.x; i < n; i += block_size_x * grid_size_x) c[i] = a[i] + b[i];
}
)cu";
  j["problem"]["n"] = 1024;
  j["grid"] = "n / (block_size_x * tile_size_x)";
  j["restrictions"].push_back("n % (block_size_x * tile_size_x) == 0");
  j["reference"] = {{"kernel", "vector_add_ref"}, {"grid", "ceil_div(n, 48)"}, {"block", 48},
                    {"config", {{"block_size_x", 48}, {"tile_size_x", 1}}}};
  std::ofstream(dir / "own.json") << j.dump();
  CHECK(run_command(ktune_exe().string() + " run --backend emu --spec " + (dir / "own.json").string() +
                        " --config '{\"block_size_x\":64,\"tile_size_x\":4}' 2>&1",
                    &out) == 0);
  CHECK_THAT(out, Catch::Contains("PASS"));
  j["defines"] = {{"tile_size_x", "2"}};
  std::ofstream(dir / "twice.json") << j.dump();
  CHECK(run_command(ktune_exe().string() + " render --space --spec " + (dir / "twice.json").string() + " 2>&1",
                    &out) == 2);
  CHECK_THAT(out, Catch::Contains("'defines' names 'tile_size_x', a tunable 'define_tunables' defines already"));
}

TEST_CASE("spec emu: a buffer copied into a __constant__ variable before each launch, as Kernel Tuner's cmem_args",
          "[spec]") {
  ktune::test::check_constant_copy("emu", "spec-constant");
}

TEST_CASE("spec emu: constant memory is filled before a variant's timed launches, not in them (as Kernel Tuner's "
          "cmem_args)",
          "[spec]") {
  const auto dir = ktune::test::scratch_dir("spec-constant-timed");
  std::ofstream(dir / "conv.json") << ktune::test::constant_spec(dir).dump();
  const auto& family = ktune::spec::load_spec_family(dir / "conv.json");
  const ktune::templates::Problem problem{"f32", {{"n", 1003}, {"taps", 17}}};
  for (const bool validate : {true, false}) {
    INFO((validate ? "validated" : "not validated") << " first");
    auto recording = std::make_unique<ktune::test::RecordingBackend>();
    const auto& log = recording->launches;
    auto runner = ktune::tuner::make_backend_runner(std::move(recording));
    ktune::tuner::RunOptions options;
    options.validate = validate;
    options.time = true;
    options.warmup = 1;
    options.min_repetitions = 2;
    options.max_repetitions = 2;
    const auto r = runner->run(family, Config({{"block", 64}}), problem, options);
    INFO(r.failure);
    REQUIRE(r.ok);
    REQUIRE(r.timing);
    CHECK(r.timing->repetitions == 2);
    CHECK_THAT(r.timing->method, Catch::Contains("constant memory filled before"));
    // One launch copies the filter (the check's, or one before the timing), then every timed launch runs alone.
    REQUIRE(log.size() == 4);
    CHECK_FALSE(log[0].timed);
    CHECK(log[0].constant_copies == 1);
    for (std::size_t i = 1; i < log.size(); ++i) {
      CHECK(log[i].timed);
      CHECK(log[i].constant_copies == 0);
    }
  }
}

TEST_CASE("spec emu: a finalist that fails when timed again wins nothing (a flaky variant), and is named",
          "[spec]") {
  const auto dir = ktune::test::scratch_dir("spec-flaky-finalist");
  // Variant 1, the faster, traps from its 7th launch in a process: the search's run makes 5 (the check, 1 warm-up, 3
  // timed), so it passes there and fails when the finalists are timed again.
  std::ofstream(dir / "flaky.cu") << R"cu(
__device__ int launches_seen;
template <int VARIANT>
__global__ void flaky(const float* x, float* z, int n) {
  if (VARIANT == 1 && threadIdx.x == 0 && blockIdx.x == 0) {
    const int seen = atomicAdd(&launches_seen, 1);
    assert(seen < 6);
  }
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = x[i], slow = 0.0f;
  if (VARIANT == 0)  // the reliable one is the slower, so only the failure keeps the fast one from winning
    for (int k = 0; k < 4000; ++k) slow = slow * 0.5f + v;
  z[i] = 2.0f * v + (slow - slow);
}
)cu";
  std::ofstream(dir / "flaky.json") << R"json({"name": "flaky", "source": "flaky.cu", "kernel": "flaky<{variant}>",
    "problem": {"n": 300}, "tunables": {"variant": [0, 1]}, "grid": "ceil_div(n, 64)", "block": 64,
    "buffers": [{"name": "x", "count": "n"}, {"name": "z", "count": "n", "role": "output"}],
    "args": ["x", "z", {"type": "i32", "value": "n"}], "reference": {"config": {"variant": 0}}})json";
  std::string out;
  const int rc = run_command(ktune_exe().string() + " --json tune --backend emu --strategy exhaustive --warmup 1 "
                                 "--repetitions 3 --spec " + (dir / "flaky.json").string() + " --cache " +
                                 (dir / "tuned.json").string() + " --log " + (dir / "tune.log").string(),
                             &out);
  INFO(out);
  REQUIRE(rc == 0);
  const auto result = nlohmann::json::parse(out.substr(out.rfind("\n{\n") + 1));
  CHECK(result["failures"] == 0);  // the search measured both
  CHECK(result["best_config"] == nlohmann::json({{"variant", 0}}));
  REQUIRE(result["disqualified"].size() == 1);
  CHECK(result["disqualified"][0]["config"] == nlohmann::json({{"variant", 1}}));
  CHECK_THAT(result["disqualified"][0]["failure"].get<std::string>(), Catch::Contains("assert"));
  std::ifstream in(dir / "tuned.json");
  CHECK(nlohmann::json::parse(in)["entries"][0]["config"] == nlohmann::json({{"variant", 0}}));
  // Printed for a person too.
  CHECK(run_command(ktune_exe().string() + " tune --backend emu --strategy exhaustive --warmup 1 --repetitions 3 "
                        "--spec " + (dir / "flaky.json").string() + " --cache " + (dir / "again.json").string() +
                        " --log " + (dir / "again.log").string() + " 2>&1",
                    &out) == 0);
  CHECK_THAT(out, Catch::Contains("flaky on f32;n=300: finalist {\"variant\":1} failed when timed again beside the "
                                  "others ("));
  CHECK(run_command(ktune_exe().string() + " log show " + (dir / "tune.log").string() + " --spec " +
                        (dir / "flaky.json").string(),
                    &out) == 0);
  CHECK_THAT(out, Catch::Contains("finalist {\"variant\":1} failed when timed again beside the others ("));
}

TEST_CASE("spec emu: an atol passes an output whose answer is near zero, which no relative error can judge",
          "[spec]") {
  const auto dir = ktune::test::scratch_dir("spec-atol");
  // (x + y) - x - y leaves fp32 rounding residues where the reference's (x - x) + (y - y) is exactly 0.
  std::ofstream(dir / "residue.cu") << R"cu(template <int BLOCK>
__global__ void residue(const float* x, const float* y, float* z, int n) {
  const int i = blockIdx.x * BLOCK + threadIdx.x;
  if (i < n) z[i] = (x[i] + y[i]) - x[i] - y[i];
}
__global__ void residue_reference(const float* x, const float* y, float* z, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) z[i] = (x[i] - x[i]) + (y[i] - y[i]);
}
)cu";
  const auto write_spec = [&](const std::string& tolerance) {
    std::ofstream(dir / "residue.json") << R"json({"name": "residue", "source": "residue.cu",
      "kernel": "residue<{block}>", "problem": {"n": 4000}, "tunables": {"block": [128]},
      "grid": "ceil_div(n, block)", "block": "block",
      "buffers": [{"name": "x", "count": "n"}, {"name": "y", "count": "n"},
                  {"name": "z", "count": "n", "role": "output"}],
      "args": ["x", "y", "z", {"type": "i32", "value": "n"}],
      "reference": {"kernel": "residue_reference", "grid": "1", "block": "64"}, "tolerance": )json"
                                        << tolerance << "}";
    return ktune_exe().string() + " run --backend emu --spec " + (dir / "residue.json").string();
  };
  std::string out;
  CHECK(run_command(write_spec("1e-5"), &out) == 1);
  CHECK_THAT(out, Catch::Contains("z relative L2 error inf > 1e-05"));
  CHECK(run_command(write_spec(R"({"rtol": 1e-5, "atol": 1e-6})"), &out) == 0);
  CHECK_THAT(out, Catch::Contains("PASS"));
  CHECK(run_command(write_spec(R"({"atol": 1e-12})"), &out) == 1);
  CHECK_THAT(out, Catch::Contains("and RMS error ") && Catch::Contains(" > atol 1e-12"));
  CHECK(run_command(write_spec(R"({"atol": -1})"), &out) == 2);
  CHECK_THAT(out, Catch::Contains("'tolerance': atol (max RMS error) must be a non-negative number"));
}

TEST_CASE("spec emu: a kernel missing a barrier fails its check by default, and run says how to tell a race",
          "[spec]") {
  const auto dir = ktune::test::scratch_dir("spec-race");
  // The block's last thread sums what the others wrote to shared memory, without waiting for them: in order it
  // runs last and the sum is right; shuffled, as on a GPU, it may run first.
  std::ofstream(dir / "block_sum.cu") << R"cu(template <int BLOCK, int SYNC>
__global__ void block_sum(const float* x, float* y, int n) {
  __shared__ float s[BLOCK];
  const int t = threadIdx.x, i = blockIdx.x * BLOCK + t;
  s[t] = i < n ? x[i] : 0.0f;
  if (SYNC) __syncthreads();
  if (t == BLOCK - 1) {
    float a = 0.0f;
    for (int k = 0; k < BLOCK; ++k) a += s[k];
    y[blockIdx.x] = a;
  }
}
)cu";
  std::ofstream(dir / "block_sum.json") << R"json({"name": "block_sum", "source": "block_sum.cu",
    "kernel": "block_sum<{block}, 0>", "problem": {"n": 4096}, "tunables": {"block": [64]},
    "grid": "n / block", "block": "block",
    "buffers": [{"name": "x", "count": "n"}, {"name": "y", "count": "n / 64", "role": "output"}],
    "args": ["x", "y", {"type": "i32", "value": "n"}],
    "reference": {"kernel": "block_sum<{block}, 1>", "config": {"block": 64}}})json";
  const std::string run = ktune_exe().string() + " run --backend emu --spec " + (dir / "block_sum.json").string();
  std::string out;
  CHECK(run_command("env -u KTUNE_EMU_SCHEDULE " + run, &out) == 1);
  // run settles it itself: in order the variant passes.
  CHECK_THAT(out, Catch::Contains("FAIL: validation: y ") &&
                      Catch::Contains("note: run again with its threads in order (KTUNE_EMU_SCHEDULE=in-order), it "
                                      "passes: the result depends on the order the threads run in"));
  CHECK(run_command("KTUNE_EMU_SCHEDULE=in-order " + run, &out) == 0);
  CHECK_THAT(out, Catch::Contains("PASS"));
  // A wrong answer whatever the order is said to be one (the kernel, not its reference, writes every block's sum
  // to the first block's place).
  std::string wrong = ktune::read_file(dir / "block_sum.cu");
  wrong.replace(wrong.find("y[blockIdx.x] = a;"), 18, "y[SYNC ? blockIdx.x : 0] = a;");
  std::ofstream(dir / "block_sum.cu") << wrong;
  CHECK(run_command("env -u KTUNE_EMU_SCHEDULE " + run, &out) == 1);
  // In order, lane 0 runs to its next collective before lane 1 starts: what a missing __syncwarp breaks stays
  // broken, and the note says so.
  CHECK_THAT(out, Catch::Contains("note: run again with its threads in order (KTUNE_EMU_SCHEDULE=in-order), it "
                                  "fails too: not a matter of the order of its warps; in order each thread still "
                                  "runs alone to its next barrier or warp collective (lane 0 before lane 1 starts), "
                                  "so lanes of a warp that read each other's shared memory with no __syncwarp "
                                  "between"));
}

TEST_CASE("spec emu: run and tune --parameters check a spec, or a built-in family, at other values of its "
          "run-time parameters",
          "[spec]") {
  const auto dir = ktune::test::scratch_dir("spec-run-parameters");
  std::ofstream(dir / "axpb.cu") << R"cu(template <int BLOCK>
__global__ void axpb(const float* x, float* y, float alpha, float beta, int n) {
  const int i = blockIdx.x * BLOCK + threadIdx.x;
  if (i < n) y[i] = alpha * x[i] + beta;
}
__global__ void axpb_reference(const float* x, float* y, float alpha, float beta, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = x[i] * alpha + beta;
}
__global__ void axpb_forgets_alpha(const float* x, float* y, float alpha, float beta, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = x[i] + beta;
}
)cu";
  const auto write_spec = [&](const std::string& file, const std::string& reference) {
    std::ofstream(dir / file) << R"json({"name": "axpb", "source": "axpb.cu", "kernel": "axpb<{block}>",
      "problem": {"n": 3000}, "tunables": {"block": [64, 128]}, "grid": "ceil_div(n, block)", "block": "block",
      "buffers": [{"name": "x", "count": "n"}, {"name": "y", "count": "n", "role": "output"}],
      "args": ["x", "y", {"type": "f32", "value": "alpha"}, {"type": "f32", "value": "beta"},
               {"type": "i32", "value": "n"}],
      "parameters": {"alpha": 1, "beta": 0.5},
      "reference": {"kernel": ")json" << reference << R"json(", "grid": "1", "block": "64"}})json";
    return ktune_exe().string() + " run --backend emu --spec " + (dir / file).string();
  };
  std::string out;
  // A reference that forgets alpha passes at the spec's alpha of 1; at 2 the check finds it.
  const std::string forgets = write_spec("forgets.json", "axpb_forgets_alpha");
  CHECK(run_command(forgets, &out) == 0);
  CHECK(run_command(forgets + " --parameters '{\"alpha\": 2}'", &out) == 1);
  CHECK_THAT(out, Catch::Contains("FAIL: validation: y relative L2 error"));
  // A right one agrees at any values, in run and in tune.
  const std::string right = write_spec("right.json", "axpb_reference");
  CHECK(run_command(right + " --parameters '{\"alpha\": -3, \"beta\": 2}'", &out) == 0);
  CHECK(run_command(ktune_exe().string() + " tune --backend emu --budget 2 --spec " + (dir / "right.json").string() +
                        " --parameters '{\"alpha\": -3}' --cache " + (dir / "c.json").string() + " --log " +
                        (dir / "s.log").string(),
                    &out) == 0);
  CHECK_THAT(out, Catch::Contains("2 evaluated of 2 valid configs (2 points), 0 failed]"));
  // Names the spec does not take.
  CHECK(run_command(right + " --parameters '{\"gamma\": 1}'", &out) == 2);
  CHECK_THAT(out, Catch::Contains("axpb: no parameter 'gamma'; its parameters: alpha, beta"));
  // A built-in family's reference runs at the values given too; a value no launch takes is refused first.
  const std::string builtin = ktune_exe().string() + " run --backend emu --family ";
  CHECK(run_command(builtin + "softmax_fwd --parameters '{\"scale\": 0.5}'", &out) == 0);
  CHECK_THAT(out, Catch::Contains("PASS"));
  CHECK(run_command(builtin + "adamw --parameters '{\"lr\": 0.01, \"beta2\": 0.95, \"step\": 1000}'", &out) == 0);
  CHECK_THAT(out, Catch::Contains("PASS"));
  CHECK(run_command(builtin + "adamw --parameters '{\"beta1\": 1}'", &out) == 2);
  CHECK_THAT(out, Catch::Contains("adamw: beta1 must be in [0, 1), got 1"));
}

TEST_CASE("spec emu: the reference's config may lie outside the tunables' values", "[spec]") {
  // A simple reference (32 threads, one element each) need not be a point of the search.
  const auto dir = ktune::test::scratch_dir("spec-reference-config");
  fs::copy_file(example("vector_add/vector_add.cu"), dir / "vector_add.cu");
  nlohmann::json spec = nlohmann::json::parse(std::ifstream(example("vector_add/vector_add.json")));
  spec["reference"] = {{"config", {{"block", 32}, {"vec", 1}}}};
  std::ofstream(dir / "vector_add.json") << spec.dump();
  const std::string run = ktune_exe().string() + " run --backend emu --spec " + (dir / "vector_add.json").string();
  std::string out;
  CHECK(run_command(run, &out) == 0);
  CHECK_THAT(out, Catch::Contains("PASS"));
  // Its names are still the tunables'.
  spec["reference"] = {{"config", {{"blocks", 32}}}};
  std::ofstream(dir / "vector_add.json") << spec.dump();
  CHECK(run_command(run, &out) == 2);
  CHECK_THAT(out, Catch::Contains("reference config: unknown tunable 'blocks' (did you mean 'block'?)"));
}

TEST_CASE("spec emu: a scratch buffer is the kernel's own workspace, used and not checked", "[spec]") {
  // Each thread leaves its x in global scratch for its neighbour, which reads it after the block's barrier: what
  // the scratch holds is the kernel's business (the reference never writes it), the output alone is checked.
  const auto dir = ktune::test::scratch_dir("spec-scratch");
  std::ofstream(dir / "swap.cu") << R"cu(template <int BLOCK>
__global__ void swap_pairs(const float* x, float* tmp, float* y, int n) {
  const int i = blockIdx.x * BLOCK + threadIdx.x;
  if (i < n) tmp[i] = x[i];
  __syncthreads();
  if (i < n) y[i] = 2.0f * tmp[i ^ 1];
}
__global__ void swap_pairs_reference(const float* x, float* tmp, float* y, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = 2.0f * x[i ^ 1];
}
)cu";
  const auto write_spec = [&](const std::string& tmp) {
    std::ofstream(dir / "swap.json") << R"json({"name": "swap_pairs", "source": "swap.cu",
      "kernel": "swap_pairs<{block}>", "problem": {"n": 3000}, "tunables": {"block": [64, 128]},
      "grid": "ceil_div(n, block)", "block": "block",
      "buffers": [{"name": "x", "count": "n"}, )json" << tmp << R"json(, {"name": "y", "count": "n", "role": "output"}],
      "args": ["x", "tmp", "y", {"type": "i32", "value": "n"}],
      "reference": {"kernel": "swap_pairs_reference", "grid": "1", "block": "64"}})json";
  };
  const std::string run = ktune_exe().string() + " run --backend emu --spec " + (dir / "swap.json").string();
  std::string out;
  write_spec(R"({"name": "tmp", "count": "n", "role": "scratch"})");
  CHECK(run_command(run, &out) == 0);
  CHECK_THAT(out, Catch::Contains("PASS") && Catch::Contains("y ") && !Catch::Contains("tmp "));
  CHECK(run_command(ktune_exe().string() + " tune --backend emu --budget 2 --spec " + (dir / "swap.json").string() +
                        " --cache " + (dir / "c.json").string() + " --log " + (dir / "s.log").string(),
                    &out) == 0);
  CHECK_THAT(out, Catch::Contains("2 evaluated of 2 valid configs (2 points), 0 failed]"));
  // As an output it would need an answer, which the reference never writes.
  write_spec(R"({"name": "tmp", "count": "n", "role": "output"})");
  CHECK(run_command(run, &out) == 2);
  CHECK_THAT(out, Catch::Contains("left NaN or Inf in buffer 'tmp'"));
  // It is never checked, so it takes no tolerance.
  write_spec(R"({"name": "tmp", "count": "n", "role": "scratch", "tolerance": 0.1})");
  CHECK(run_command(run, &out) == 2);
  CHECK_THAT(out, Catch::Contains("buffer 'tmp': a scratch buffer is not checked, so it takes no tolerance"));
}

TEST_CASE("spec emu: a reference that leaves an output element unwritten is named, not taken for an answer of 0",
          "[spec]") {
  const auto dir = ktune::test::scratch_dir("spec-reference-unwritten");
  std::ofstream(dir / "twice.cu") << R"cu(__global__ void twice(const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.0f * x[i];
}
__global__ void twice_reference(const float* x, float* y, int n) {  // one block: the first blockDim.x only
  if (threadIdx.x < n) y[threadIdx.x] = 2.0f * x[threadIdx.x];
}
)cu";
  std::ofstream(dir / "twice.json") << R"json({"name": "twice", "source": "twice.cu", "kernel": "twice",
      "problem": {"n": 1000}, "tunables": {"block": [128]}, "grid": "ceil_div(n, block)", "block": "block",
      "buffers": [{"name": "x", "count": "n"}, {"name": "y", "count": "n", "role": "output"}],
      "args": ["x", "y", {"type": "i32", "value": "n"}],
      "reference": {"kernel": "twice_reference", "grid": "1", "block": "128"}})json";
  std::string out;
  CHECK(run_command(ktune_exe().string() + " run --backend emu --spec " + (dir / "twice.json").string(), &out) == 2);
  CHECK_THAT(out, Catch::Contains((dir / "twice.json").string() +
                                  ": the reference twice_reference left NaN or Inf in buffer 'y' (an output starts "
                                  "poisoned"));
}

TEST_CASE("spec emu: a reference that leaves an integer output element unwritten is named, though no poison is NaN",
          "[spec]") {
  // All bits set is -1 in an int, 255 in a u8: an answer like any other, where a float's is NaN.
  const auto dir = ktune::test::scratch_dir("spec-reference-unwritten-int");
  for (const std::string type : {"int", "unsigned char"})
    std::ofstream(dir / (type == "int" ? "i32.cu" : "u8.cu")) << "__global__ void twice(const " << type << "* x, "
                                                              << type << R"cu(* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2 * x[i];
}
)cu";
  const auto write_spec = [&](const std::string& dtype, const std::string& grid) {
    std::ofstream(dir / "twice.json") << R"json({"name": "twice", "source": ")json" << dtype << R"json(.cu",
      "kernel": "twice", "dtypes": [")json" << dtype << R"json("], "problem": {"n": 100},
      "tunables": {"block": [32, 64]}, "grid": ")json" << grid << R"json(", "block": "block",
      "buffers": [{"name": "x", "count": "n"}, {"name": "y", "count": "n", "role": "output"}],
      "args": ["x", "y", {"type": "i32", "value": "n"}], "reference": {"config": {"block": 32}}})json";
  };
  const std::string run = ktune_exe().string() + " run --backend emu --spec " + (dir / "twice.json").string() +
                          " --config '{\"block\":32}'";
  std::string out;
  for (const std::string dtype : {"i32", "u8"}) {
    INFO(dtype);
    write_spec(dtype, "div(n, block)");  // 3 blocks of 32: elements 96 to 99 never written
    CHECK(run_command(run, &out) == 2);
    CHECK_THAT(out, Catch::Contains((dir / "twice.json").string() +
                                    ": the reference twice left 4 of 100 elements of buffer 'y' unwritten, the first "
                                    "at index 96 (an output starts poisoned"));
    write_spec(dtype, "ceil_div(n, block)");
    CHECK(run_command(run, &out) == 0);
    CHECK_THAT(out, Catch::Contains("PASS"));
  }
}

TEST_CASE("spec emu: a variant that leaves an integer output unwritten fails, though its answer there is the "
          "poison's bits",
          "[spec]") {
  // Every answer is -1 in an int, 255 in a u8: all bits set, as an output starts. The variant's grid leaves the
  // last 4 elements unwritten; the reference's writes them all.
  const auto dir = ktune::test::scratch_dir("spec-variant-unwritten-int");
  for (const std::string type : {"int", "unsigned char"})
    std::ofstream(dir / (type == "int" ? "i32.cu" : "u8.cu")) << "__global__ void ones(const " << type << "* x, "
                                                              << type << R"cu(* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] - x[i] - 1;
}
)cu";
  const auto write_spec = [&](const std::string& dtype, const std::string& grid) {
    std::ofstream(dir / "ones.json") << R"json({"name": "ones", "source": ")json" << dtype << R"json(.cu",
      "kernel": "ones", "dtypes": [")json" << dtype << R"json("], "problem": {"n": 100},
      "tunables": {"block": [32, 64]}, "grid": ")json" << grid << R"json(", "block": "block",
      "buffers": [{"name": "x", "count": "n"}, {"name": "y", "count": "n", "role": "output"}],
      "args": ["x", "y", {"type": "i32", "value": "n"}],
      "reference": {"config": {"block": 32}, "grid": "ceil_div(n, block)"}})json";
  };
  const std::string run = ktune_exe().string() + " run --backend emu --spec " + (dir / "ones.json").string() +
                          " --config '{\"block\":32}' 2>&1";
  std::string out;
  for (const std::string dtype : {"i32", "u8"}) {
    INFO(dtype);
    write_spec(dtype, "div(n, block)");  // 3 blocks of 32: elements 96 to 99 never written
    CHECK(run_command(run, &out) == 1);
    CHECK_THAT(out, Catch::Contains("integers differ from the reference's"));
    write_spec(dtype, "ceil_div(n, block)");
    CHECK(run_command(run, &out) == 0);
    CHECK_THAT(out, Catch::Contains("PASS"));
  }
}

TEST_CASE("spec emu: static __shared__ arrays in a device function run, as CUDA's block reductions write them",
          "[spec]") {
  const auto dir = ktune::test::scratch_dir("spec-static-shared");
  std::ofstream(dir / "sum.cu") << R"cu(
__device__ float block_sum(float v) {
  static __shared__ float partial[32];
  __shared__ float total;
  for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0;
    for (int w = 0; w < blockDim.x / 32; ++w) t += partial[w];
    total = t;
  }
  __syncthreads();
  return total;
}
__global__ void sum(const float* x, float* y, int n) {
  float v = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) v += x[i];
  const float s = block_sum(v);
  if (threadIdx.x == 0) y[0] = s;
}
__global__ void sum_reference(const float* x, float* y, int n) {
  if (threadIdx.x != 0) return;
  float s = 0;
  for (int i = 0; i < n; ++i) s += x[i];
  y[0] = s;
}
)cu";
  std::ofstream(dir / "sum.json") << R"json({"name": "sum", "source": "sum.cu", "kernel": "sum",
      "problem": {"n": 1000}, "tunables": {"block": [64, 256]}, "grid": "1", "block": "block",
      "buffers": [{"name": "x", "count": "n"}, {"name": "y", "count": "1", "role": "output", "tolerance": 1e-4}],
      "args": ["x", "y", {"type": "i32", "value": "n"}],
      "reference": {"kernel": "sum_reference", "grid": "1", "block": "32"}})json";
  std::string out;
  CHECK(run_command(ktune_exe().string() + " run --backend emu --spec " + (dir / "sum.json").string() + " 2>&1",
                    &out) == 0);
  CHECK_THAT(out, Catch::Contains("PASS"));
}

TEST_CASE("spec emu: a config whose define or scalar argument fails is pruned, and the session goes on", "[spec]") {
  const auto dir = ktune::test::scratch_dir("spec-define-arg-pruned");
  std::ofstream(dir / "fill.cu") << R"cu(__global__ void fill(float* z, int n, int per_block) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) z[i] = 1.0f + 0 * per_block + 0 * X;
}
)cu";
  std::ofstream(dir / "fill.json") << R"json({"name": "fill", "source": "fill.cu", "kernel": "fill",
      "problem": {"n": 96}, "tunables": {"block": [32, 64, 128]}, "defines": {"X": "n // (block - 128)"},
      "grid": "ceil_div(n, block)", "block": "block", "buffers": [{"name": "z", "count": "n", "role": "output"}],
      "args": ["z", {"type": "i32", "value": "n"}, {"type": "i32", "value": "n / block"}],
      "reference": {"config": {"block": 32}}})json";
  const std::string spec = (dir / "fill.json").string();
  std::string out;
  // block 64: 1.5 blocks per... an i32 of 1.5; block 128: a division by zero in X.
  CHECK(run_command(ktune_exe().string() + " tune --backend emu --strategy exhaustive --budget 3 --spec " + spec +
                        " --cache " + (dir / "c.json").string() + " --log " + (dir / "s.log").string(),
                    &out) == 0);
  CHECK_THAT(out, Catch::Contains("2 of the 3 points are not valid") &&
                      Catch::Contains("space exhausted (all 1 valid config measured)"));
  CHECK(fs::exists(dir / "c.json"));
  CHECK(run_command(ktune_exe().string() + " render --space --spec " + spec, &out) == 0);
  CHECK_THAT(out, Catch::Contains("args[2] value 'n / block' = 1.5 is not a whole number") ||
                      Catch::Contains("define X 'n // (block - 128)': a division by zero here"));
  CHECK(run_command(ktune_exe().string() + " run --backend emu --spec " + spec + " --config '{\"block\":128}'",
                    &out) == 2);
  CHECK_THAT(out, Catch::Contains("define X 'n // (block - 128)': a division by zero here"));
}

TEST_CASE("spec emu: a bf16 output of an f32 problem is checked at bf16's tolerance", "[spec]") {
  // The kernel rounds its product to bf16 first, as a bf16 pipeline would: within bf16's 1e-2, not f32's 1e-5.
  const auto dir = ktune::test::scratch_dir("spec-bf16-output");
  std::ofstream(dir / "fma.cu") << R"cu(#include "kt.cuh"
__global__ void fma_bf16(const float* a, const float* b, const float* c, __nv_bfloat16* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = kt::from_float<__nv_bfloat16>(kt::to_float(kt::from_float<__nv_bfloat16>(a[i] * b[i])) + c[i]);
}
__global__ void fma_reference(const float* a, const float* b, const float* c, __nv_bfloat16* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = kt::from_float<__nv_bfloat16>(a[i] * b[i] + c[i]);
}
)cu";
  std::ofstream(dir / "fma.json") << R"json({"name": "fma_bf16", "source": "fma.cu", "kernel": "fma_bf16",
      "problem": {"n": 4096}, "tunables": {"block": [64, 128]}, "grid": "ceil_div(n, block)", "block": "block",
      "buffers": [{"name": "a", "count": "n"}, {"name": "b", "count": "n"}, {"name": "c", "count": "n"},
                  {"name": "y", "count": "n", "dtype": "bf16", "role": "output"}],
      "args": ["a", "b", "c", "y", {"type": "i32", "value": "n"}],
      "reference": {"kernel": "fma_reference", "config": {"block": 64}}})json";
  std::string out;
  CHECK(run_command(ktune_exe().string() + " run --backend emu --spec " + (dir / "fma.json").string(), &out) == 0);
  CHECK_THAT(out, Catch::Contains("PASS"));
}

TEST_CASE("spec emu: a reference kernel runs at its config, or without one at the problem's first valid config",
          "[spec]") {
  // block 7 is the space's first point and not valid (96 % 7): neither the tuned kernel's name nor its grid is
  // whole there.
  const auto dir = ktune::test::scratch_dir("spec-reference-kernel-default");
  std::ofstream(dir / "fill.cu") << R"cu(template <int BLOCKS>
__global__ void fill_tiled(const float* x, float* z, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (blockIdx.x < BLOCKS && i < n) z[i] = 2.0f * x[i];
}
__global__ void fill_naive(const float* x, float* z, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) z[i] = 2.0f * x[i];
}
)cu";
  const auto write_spec = [&](const std::string& reference) {
    std::ofstream(dir / "fill.json") << R"json({"name": "fill_tiled", "source": "fill.cu",
      "kernel": "fill_tiled<{n / block}>", "problem": {"n": 96}, "tunables": {"block": [7, 32, 48]},
      "restrictions": ["n % block == 0"], "grid": "n / block", "block": "block",
      "buffers": [{"name": "x", "count": "n"}, {"name": "z", "count": "n", "role": "output"}],
      "args": ["x", "z", {"type": "i32", "value": "n"}], "reference": )json" << reference << "}";
  };
  const std::string run = ktune_exe().string() + " run --backend emu --spec " + (dir / "fill.json").string();
  std::string out;
  SECTION("with its own geometry") {
    write_spec(R"json({"kernel": "fill_naive", "grid": "ceil_div(n, 32)", "block": 32})json");
    CHECK(run_command(run, &out) == 0);
    CHECK_THAT(out, Catch::Contains("PASS"));
  }
  SECTION("at a config where the tuned kernel's name is no whole number") {
    write_spec(R"json({"kernel": "fill_naive", "config": {"block": 7}, "grid": "ceil_div(n, 7)", "block": 7})json");
    CHECK(run_command(run, &out) == 0);
    CHECK_THAT(out, Catch::Contains("PASS"));
  }
  SECTION("with the spec's") {
    write_spec(R"({"kernel": "fill_naive"})");
    CHECK(run_command(run, &out) == 0);
    CHECK_THAT(out, Catch::Contains("PASS"));
  }
}

}  // namespace spec_spec_emu_test
