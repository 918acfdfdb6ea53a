// NVRTC compilation (no GPU needed): every AdamW variant, and the defaults and
// a seeded sample of every registered family, for sm_80 and sm_90; the
// resource report; the binary cache (hit, miss, corrupt, concurrent).
#include "tuner/compile/compiler.hpp"

#include <dlfcn.h>
#include <nvrtc.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <thread>

#include "base/files.hpp"
#include "support.hpp"
#include "tuner/compile/compile_check.hpp"
#include "tuner/exec/backend.hpp"

namespace tuner_compile_compiler_test {

using namespace ktune;
using namespace ktune::tuner;
namespace fs = std::filesystem;

namespace {
templates::Rendered probe(const std::string& body_tag) {
  templates::Rendered r;
  r.source = "template <int N> __global__ void probe(float* x) { __shared__ float s[N]; s[threadIdx.x] = x[threadIdx.x]"
             " * 2; __syncthreads(); x[threadIdx.x] = s[N - 1 - threadIdx.x]; } // " + body_tag + "\n";
  r.kernels = {"probe<64>"};
  return r;
}
}  // namespace

TEST_CASE("every AdamW variant compiles for sm_80 and sm_90 and defaults do not spill", "[compile]") {
  const Compiler compiler;
  std::vector<const templates::Family*> families = {&templates::find_family("adamw"),
                                                    &templates::find_family("adamw_single"),
                                                    &templates::find_family("adamw_eager")};
  for (const char* arch : {"sm_80", "sm_90"}) {
    CompileCheckOptions o;
    o.arch = arch;
    o.which = CompileCheckOptions::Which::kAll;
    const auto s = compile_check(families, o, compiler);
    INFO(s.line());
    for (const auto& row : s.rows)
      if (!row.failure.empty()) FAIL_CHECK(row.family << " " << row.config.str() << ": " << row.failure << "\n"
                                                      << row.result.log);
    CHECK(s.failures == 0);
    CHECK(s.rows.size() > 300);
    for (const auto& row : s.rows) {
      REQUIRE(row.result.ok);
      for (const auto& k : row.result.kernels) {
        CHECK(k.registers > 0);
        if (row.is_default) CHECK(k.spill_bytes() == 0);
      }
    }
  }
}

TEST_CASE("every family's defaults and a seeded sample compile for sm_80 and sm_90 without default spills",
          "[compile]") {
  const Compiler compiler;
  // Two sampled configs per family and problem class on each target, another two on the other (its own seed):
  // four configs a class in all, at half the compiles of four on both.
  for (const auto& [arch, seed] : {std::pair{"sm_80", 11}, std::pair{"sm_90", 12}}) {
    CompileCheckOptions o;
    o.arch = arch;
    o.which = CompileCheckOptions::Which::kSample;
    o.sample = 2;
    o.seed = seed;
    const auto s = compile_check({}, o, compiler);  // every registered family
    INFO(s.line());
    for (const auto& row : s.rows)
      if (!row.failure.empty()) FAIL_CHECK(row.family << " " << row.config.str() << ": " << row.failure << "\n"
                                                      << row.result.log);
    CHECK(s.failures == 0);
    for (const auto* family : templates::all_families()) {
      INFO(family->name());
      const auto defaults = std::count_if(s.rows.begin(), s.rows.end(), [&](const CompileCheckRow& r) {
        return r.family == family->name() && r.is_default;
      });
      CHECK(static_cast<std::size_t>(defaults) == family->problem_classes().size());
    }
    for (const auto& row : s.rows)
      for (const auto& k : row.result.kernels)
        if (row.is_default) CHECK(k.spill_bytes() == 0);
    // A GPU checks each launch's arguments against the kinds its kernel's mangled name gives (tuner/exec/
    // arguments.cpp): every plan's arguments agree with them, so no built-in kernel is refused on a device.
    for (const auto& row : s.rows) {
      if (!row.result.ok) continue;
      INFO(row.family << " " << row.config.str());
      const templates::Family& family = templates::find_family(row.family);
      std::vector<std::uint64_t> addresses;
      for (std::size_t i = 0; i < family.buffer_shapes(row.problem).size(); ++i)
        addresses.push_back((std::uint64_t{1} << 40) + (std::uint64_t{i} << 32));
      for (const auto& l : family.plan(row.config, row.problem, addresses, DeviceLimits::for_arch(arch))) {
        const auto& kernel = row.result.kernels.at(static_cast<std::size_t>(l.kernel));
        const auto kinds = exec::parameter_kinds(kernel.lowered_name);
        REQUIRE(kinds.has_value());
        CHECK(kinds->size() == l.args.count());
        CHECK_NOTHROW(exec::check_arguments("GPU", row.family, l.args.sizes(), *kinds, l.args));
      }
    }
  }
}

TEST_CASE("a compile check's sample is as many valid configs as asked, however sparse the space, and counts each "
          "invalid point once",
          "[compile]") {
  // attention_bwd's space holds 82944 points, of which a few hundred are valid for a class at head_dim 128.
  const templates::Family& f = templates::find_family("attention_bwd");
  const templates::Problem p{"f16", {{"batch", 1}, {"seq", 256}, {"heads", 1}, {"head_dim", 128}, {"causal", 1}}};
  const auto limits = DeviceLimits::for_arch("sm_80");
  std::size_t valid = 0, refused = 0;
  for (std::uint64_t i = 0; i < f.space().size(); ++i) (f.is_valid(f.space().at(i), p, limits) ? valid : refused)++;
  REQUIRE(valid > 20);
  REQUIRE(refused > 50 * valid);
  CompileCheckOptions o;
  o.which = CompileCheckOptions::Which::kSample;
  o.sample = 8;
  std::size_t invalid = 0;
  const auto configs = configs_to_check(f, p, limits, o, invalid);
  CHECK(invalid == refused);
  const std::size_t defaults = configs.size() - 8;
  REQUIRE(defaults >= 1);
  CHECK(configs.front() == f.default_config(p));
  for (std::size_t i = 0; i < configs.size(); ++i) {
    CHECK(f.is_valid(configs[i], p, limits));
    for (std::size_t j = 0; j < i; ++j) CHECK(configs[i] != configs[j]);
  }
  std::size_t again_invalid = 0;
  CHECK(configs_to_check(f, p, limits, o, again_invalid) == configs);  // seeded
  o.seed = 2;
  CHECK(configs_to_check(f, p, limits, o, again_invalid) != configs);
  // More than the space holds: every valid config, once.
  o.sample = std::uint64_t{1} << 40;
  CHECK(configs_to_check(f, p, limits, o, again_invalid).size() == valid);  // the defaults among them
  o.which = CompileCheckOptions::Which::kAll;
  CHECK(configs_to_check(f, p, limits, o, again_invalid).size() == valid);
}

TEST_CASE("the binary cache keeps the NVRTC build apart: its library's GNU build id, as readelf reads it",
          "[compile]") {
  const std::string& id = nvrtc_build();
  CHECK(id.find_first_not_of("0123456789abcdef") == std::string::npos);
  Dl_info info{};
  REQUIRE(::dladdr(reinterpret_cast<void*>(&nvrtcVersion), &info) != 0);
  std::string out;
  if (ktune::test::run_command("readelf -n " + std::string(info.dli_fname) + " 2>/dev/null", &out) != 0 ||
      out.find("Build ID: ") == std::string::npos) {
    WARN("no readelf here, or the library has no build id: nothing to compare with");
    return;
  }
  const std::size_t at = out.find("Build ID: ") + 10;
  CHECK(id == out.substr(at, out.find('\n', at) - at));
  CHECK(id.size() >= 16);
}

TEST_CASE("resource report: registers, shared memory and spills are parsed", "[compile]") {
  const Compiler compiler(test::scratch_dir("cubin").string(), true);
  const auto r = compiler.compile(probe("report"), "sm_90");
  REQUIRE(r.ok);
  REQUIRE(r.kernels.size() == 1);
  CHECK(r.kernels[0].lowered_name == "_Z5probeILi64EEvPf");
  CHECK(r.kernels[0].registers > 0);
  CHECK(r.kernels[0].static_smem_bytes == 64 * 4);
  CHECK(r.kernels[0].spill_bytes() == 0);
  CHECK(r.cubin.size() > 100);
  const auto parsed = parse_ptxas_report(
      "ptxas info    : Compiling entry function '_Z1kv' for 'sm_90'\n"
      "ptxas info    : Function properties for _Z1kv\n"
      "ptxas         .     24 bytes stack frame, 16 bytes spill stores, 8 bytes spill loads\n"
      "ptxas info    : Used 255 registers, used 1 barriers, 1024 bytes smem, 400 bytes cmem[0]\n");
  REQUIRE(parsed.size() == 1);
  CHECK(parsed[0].registers == 255);
  CHECK(parsed[0].spill_bytes() == 24);
  CHECK(parsed[0].stack_bytes == 24);
  CHECK(parsed[0].static_smem_bytes == 1024);
}

TEST_CASE("a variant that fails to compile is a result with its log", "[compile]") {
  const Compiler compiler(test::scratch_dir("cubin").string(), true);
  templates::Rendered bad;
  bad.source = "__global__ void k(float* x) { x[0] = undeclared_name; }\n";
  bad.kernels = {"k"};
  const auto r = compiler.compile(bad, "sm_90");
  CHECK_FALSE(r.ok);
  CHECK_THAT(r.log, Catch::Contains("undeclared_name"));
  CHECK(r.cubin.empty());
  // Static shared memory above 48 KiB does not compile either.
  templates::Rendered big;
  big.source = "__global__ void k(float* x) { __shared__ float s[16384]; s[threadIdx.x] = 1; x[0] = s[1]; }\n";
  big.kernels = {"k"};
  CHECK_FALSE(compiler.compile(big, "sm_90").ok);
}

TEST_CASE("binary cache: miss, hit, corrupt entry, other arch", "[compile]") {
  const auto dir = test::scratch_dir("cubin");
  const Compiler compiler(dir.string(), true);
  const auto first = compiler.compile(probe("cache"), "sm_90");
  REQUIRE(first.ok);
  CHECK_FALSE(first.cache_hit);
  const auto second = compiler.compile(probe("cache"), "sm_90");
  CHECK(second.cache_hit);
  CHECK(second.cubin == first.cubin);
  CHECK(second.kernels[0].registers == first.kernels[0].registers);
  CHECK(second.key == first.key);

  SECTION("a corrupt binary is recompiled, not loaded") {
    write_file_atomic(dir / (first.key + ".cubin"), "garbage");
    const auto again = compiler.compile(probe("cache"), "sm_90");
    CHECK(again.ok);
    CHECK_FALSE(again.cache_hit);
    CHECK(again.cubin == first.cubin);
    CHECK(compiler.compile(probe("cache"), "sm_90").cache_hit);
  }
  SECTION("truncated metadata is a miss") {
    std::ofstream(dir / (first.key + ".json")) << "{\"arch\":";
    CHECK_FALSE(compiler.compile(probe("cache"), "sm_90").cache_hit);
  }
  SECTION("the key covers arch and source") {
    CHECK(compiler.compile(probe("cache"), "sm_80").key != first.key);
    CHECK(compiler.compile(probe("other"), "sm_90").key != first.key);
  }
}

TEST_CASE("binary cache: a log that quotes a source line not in UTF-8 is stored and read back", "[compile]") {
  const auto dir = test::scratch_dir("cubin");
  const Compiler compiler(dir.string(), true);
  templates::Rendered r;
  // NVRTC warns of the unused variable and quotes its line, Latin-1 comment and all.
  r.source = "__global__ void k(float* x) {\n  int unused = 0;  // caf\xe9" "\n  x[0] = 1;\n}\n";
  r.kernels = {"k"};
  const auto first = compiler.compile(r, "sm_90");
  REQUIRE(first.ok);
  CHECK(first.log.find("caf\xe9") != std::string::npos);
  const auto second = compiler.compile(r, "sm_90");
  CHECK(second.cache_hit);
  CHECK(second.cubin == first.cubin);
}

TEST_CASE("binary cache: a cache folder that cannot be written keeps nothing, and the compile stands", "[compile]") {
  const auto dir = test::scratch_dir("cubin-unwritable");
  std::ofstream(dir / "taken") << "a file where the cache's folder would be";
  const Compiler unwritable((dir / "taken" / "cubin").string(), true);
  const auto r = unwritable.compile(probe("unwritable"), "sm_90");
  CHECK(r.ok);
  CHECK(r.cubin.size() > 100);
  REQUIRE(r.kernels.size() == 1);
  CHECK(r.kernels[0].registers > 0);
  CHECK_THAT(r.not_stored, Catch::StartsWith("cannot write file " + (dir / "taken" / "cubin").string()));
  const auto again = unwritable.compile(probe("unwritable"), "sm_90");
  CHECK(again.ok);
  CHECK_FALSE(again.cache_hit);
  CHECK(again.cubin == r.cubin);
  // Kept where it can be written; a failed compile has nothing to keep.
  const Compiler writable((dir / "cubin").string(), true);
  CHECK(writable.compile(probe("unwritable"), "sm_90").not_stored.empty());
  CHECK(writable.compile(probe("unwritable"), "sm_90").cache_hit);
  templates::Rendered bad;
  bad.source = "__global__ void k() { undeclared_name; }\n";
  bad.kernels = {"k"};
  const auto failed = unwritable.compile(bad, "sm_90");
  CHECK_FALSE(failed.ok);
  CHECK(failed.not_stored.empty());
}

TEST_CASE("binary cache: concurrent writers of the same entry leave one valid entry", "[compile]") {
  const auto dir = test::scratch_dir("cubin");
  std::vector<std::thread> threads;
  std::vector<CompileResult> results(4);
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] {
      results[static_cast<std::size_t>(i)] = Compiler(dir.string(), true).compile(probe("race"), "sm_90");
    });
  for (auto& t : threads) t.join();
  for (const auto& r : results) CHECK(r.ok);
  const auto hit = Compiler(dir.string(), true).compile(probe("race"), "sm_90");
  CHECK(hit.cache_hit);
  CHECK(hit.cubin == results[0].cubin);
  std::size_t temps = 0;
  for (const auto& e : fs::directory_iterator(dir))
    temps += e.path().filename().string().find(".tmp.") != std::string::npos;
  CHECK(temps == 0);
}

TEST_CASE("compile_many compiles in parallel and keeps order", "[compile]") {
  const Compiler compiler(test::scratch_dir("cubin").string(), false);
  std::vector<templates::Rendered> sources = {probe("a"), probe("b"), probe("c")};
  sources[1].source = "__global__ void k() { nonsense }\n";
  sources[1].kernels = {"k"};
  const auto results = compiler.compile_many(sources, "sm_80", 2);
  REQUIRE(results.size() == 3);
  CHECK(results[0].ok);
  CHECK_FALSE(results[1].ok);
  CHECK(results[2].ok);
}

}  // namespace tuner_compile_compiler_test
