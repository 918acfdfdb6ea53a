// GEMM algorithm selection (tuner/cuda/gemm_select.hpp) driven by a fake
// engine: the fastest valid candidate wins, a wrong or failing one is
// rejected, the choice is written to the tuned cache as a `gemm` entry, and
// a later run reads it back without timing; a refused, stale or malformed
// entry is timed again.
#include "tuner/cuda/gemm_select.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <map>

#include "base/error.hpp"
#include "cache/store.hpp"
#include "support.hpp"
#include "templates/problem.hpp"

namespace tuner_gemm_select_test {

using namespace ktune;
using tuner::GemmAlgo;
using tuner::GemmDesc;

namespace {

GemmAlgo algo(std::uint64_t id) {
  GemmAlgo a;
  a.words = {id, 0x1234, 0, 0, 0, 0, 0, ~std::uint64_t{0}};
  a.attributes = {{"algo_id", static_cast<std::int64_t>(id)}, {"tile", 20}, {"splitk", -1}};
  return a;
}

// Candidates 0..3 in the heuristic's order, with a median time and an error
// against the reference each; counts every call.
struct FakeTrials : tuner::GemmTrials {
  std::map<std::uint64_t, double> ms{{0, 4.0}, {1, 2.0}, {2, 1.0}, {3, 3.0}};
  std::map<std::uint64_t, double> wrong;     // id -> error against the reference
  std::map<std::uint64_t, bool> fails;       // id -> time() throws
  std::string refuse;                        // refusal() of every stored algorithm
  std::string version = "fakeLt 1";
  bool out_of_memory = false;                // prepare() throws
  int candidate_calls = 0, time_calls = 0, error_calls = 0, refusal_calls = 0, prepared = 0, released = 0;

  std::string library() const override { return version; }
  std::vector<GemmAlgo> candidates(const GemmDesc&, int count) override {
    ++candidate_calls;
    std::vector<GemmAlgo> out;
    for (std::uint64_t i = 0; i < 4 && static_cast<int>(i) < count; ++i) out.push_back(algo(i));
    return out;
  }
  std::string refusal(const GemmDesc&, const GemmAlgo&) override {
    ++refusal_calls;
    return refuse;
  }
  void prepare(const GemmDesc&) override {
    if (out_of_memory) throw Error(ErrorKind::kCuda, "cuMemAlloc failed: out of memory (GEMM trial A)");
    ++prepared;
  }
  void release() override { ++released; }
  tuner::Measurement time(const GemmDesc&, const GemmAlgo& a) override {
    REQUIRE(prepared == released + 1);  // on the prepared operands
    ++time_calls;
    if (fails.count(a.words[0])) throw Error(ErrorKind::kCuda, "launch failed");
    return tuner::summarize({ms.at(a.words[0]), ms.at(a.words[0]) * 1.01, ms.at(a.words[0]) * 0.99});
  }
  double error(const GemmDesc&, const GemmAlgo& a, const GemmAlgo& reference) override {
    REQUIRE(prepared == released + 1);
    ++error_calls;
    REQUIRE(reference == algo(0));
    return wrong.count(a.words[0]) ? wrong.at(a.words[0]) : 1e-7;
  }
};

GemmDesc qkv() {  // (N, 3C) = (N, C) x (3C, C)^T, at 16-byte aligned addresses
  return {.trans_b = true, .m = 512, .n = 192, .k = 64, .a = 0x10000, .b = 0x20010, .c = 0x30000, .lda = 64,
          .ldb = 64, .ldc = 192};
}

DeviceLimits gpu() {
  DeviceLimits d = DeviceLimits::for_arch("sm_90");
  d.name = "NVIDIA H100 80GB HBM3";
  d.driver_version = 13000;
  return d;
}

}  // namespace

TEST_CASE("gemm key: shape, transposes, strides, alignment, dtype, epilogue and GPU", "[tuner][gemm]") {
  const GemmDesc g = qkv();
  const cache::Key k = tuner::gemm_key(g, gpu(), "cublasLt 130100");
  CHECK(k.family == "gemm");
  CHECK(k.dtype == "f32");
  CHECK(k.source_hash == "cublasLt 130100");
  CHECK(k.gpu_name == "NVIDIA H100 80GB HBM3");
  CHECK(k.arch == "sm_90");
  CHECK(k.problem_key ==
        "f32;accumulate=0;align_a=256;align_b=16;align_c=256;batch=1;k=64;lda=64;ldb=64;ldc=192;m=512;n=192;"
        "stride_a=0;stride_b=0;stride_c=0;trans_a=0;trans_b=1");
  // Each of these is another GEMM for an algorithm.
  const auto differs = [&](GemmDesc other) { return tuner::gemm_key(other, gpu(), "cublasLt 130100").identity(); };
  GemmDesc o = g;
  o.beta = 1;
  CHECK(differs(o) != k.identity());
  o = g, o.trans_a = true;
  CHECK(differs(o) != k.identity());
  o = g, o.b += 4;
  CHECK(differs(o) != k.identity());
  o = g, o.k = 65;
  CHECK(differs(o) != k.identity());
  // alpha scales in every algorithm's epilogue: the same GEMM for the choice.
  o = g, o.alpha = 0.125f;
  CHECK(differs(o) == k.identity());
  DeviceLimits other = gpu();
  other.name = "NVIDIA A100-SXM4-80GB";
  CHECK(tuner::gemm_key(g, other, "cublasLt 130100").identity() != k.identity());
}

TEST_CASE("gemm selection: the fastest valid candidate, cached and read back without timing", "[tuner][gemm]") {
  const auto path = test::scratch_dir("gemm_select") / "tuned.json";
  cache::CacheFile file(path);
  FakeTrials fake;
  fake.wrong[2] = 0.5;  // the fastest computes a wrong result
  fake.fails[3] = true;
  {
    tuner::GemmSelector s(fake, gpu(), nullptr, [&](const cache::Entry& e) { file.put(e); });
    CHECK(s.choose(qkv()) == algo(1));  // 2 is faster but wrong, 3 does not run, 0 is slower
    CHECK(s.counts().timed == 1);
    CHECK(s.counts().rejected == 2);
    CHECK(fake.error_calls == 2);  // 2 rejected, 1 accepted; 0 (the reference) is never checked
    CHECK(fake.time_calls == 4);
    // The same GEMM again in the run (at other addresses of the same
    // alignment): no second timing.
    GemmDesc moved = qkv();
    moved.a += 512, moved.b += 256, moved.c += 1024;
    CHECK(s.choose(moved) == algo(1));
    CHECK(fake.time_calls == 4);
    CHECK(fake.candidate_calls == 1);
    // Less aligned, or accumulating: another GEMM for an algorithm.
    moved.b += 4;
    s.choose(moved);
    CHECK(fake.candidate_calls == 2);
    GemmDesc accumulate = qkv();
    accumulate.beta = 1;
    s.choose(accumulate);
    CHECK(fake.candidate_calls == 3);
    CHECK(s.counts().timed == 3);
  }
  auto entries = file.load_input();
  REQUIRE(entries.size() == 3);
  const auto at = std::find_if(entries.begin(), entries.end(), [](const cache::Entry& x) {
    return x.key.identity() == tuner::gemm_key(qkv(), gpu(), "fakeLt 1").identity();
  });
  REQUIRE(at != entries.end());
  const cache::Entry& e = *at;
  CHECK(e.key.identity() == tuner::gemm_key(qkv(), gpu(), "fakeLt 1").identity());
  CHECK(e.time_ms == Approx(2.0));
  CHECK(e.evaluations == 4);
  CHECK(e.config.at("heuristic_rank") == 1);
  CHECK(e.config.at("heuristic_ms").get<double>() == Approx(4.0));
  CHECK(e.config.at("algo_id") == 1);
  std::string why;
  const auto back = tuner::gemm_algo_from_json(e.config, why);
  REQUIRE(back);
  CHECK(*back == algo(1));
  CHECK(back->attributes == algo(1).attributes);

  // A later run reads the entry and times nothing.
  const auto cache = cache::TunedCache::read(path);
  FakeTrials again;
  tuner::GemmSelector s2(again, gpu(), &cache, [&](const cache::Entry& e) { file.put(e); });
  CHECK(s2.choose(qkv()) == algo(1));
  CHECK(s2.counts().cached == 1);
  CHECK(s2.counts().timed == 0);
  CHECK(again.time_calls == 0);
  CHECK(again.candidate_calls == 0);
  CHECK(again.refusal_calls == 1);  // checked on load
  CHECK(s2.warnings().empty());

  // Another shape: timed (an algorithm is never taken from a nearest shape).
  GemmDesc wider = qkv();
  wider.n = 256, wider.ldc = 256;
  CHECK(s2.choose(wider) == algo(2));  // here the fastest is right
  CHECK(s2.counts().timed == 1);
  CHECK(again.time_calls == 4);
  CHECK(file.load_input().size() == 4);

  SECTION("an entry the engine refuses is timed again, with a warning") {
    FakeTrials refusing;
    refusing.refuse = "cublasLtMatmulAlgoCheck returns status 15";
    tuner::GemmSelector s3(refusing, gpu(), &cache, {});
    CHECK(s3.choose(qkv()) == algo(2));
    CHECK(s3.counts().timed == 1);
    REQUIRE(s3.warnings().size() == 1);
    CHECK_THAT(s3.warnings()[0], Catch::Contains("status 15") && Catch::Contains("timed again"));
  }
  SECTION("an entry of another library version is stale: a warning, and timed again") {
    FakeTrials newer;
    newer.version = "fakeLt 2";
    tuner::GemmSelector s3(newer, gpu(), &cache, {});
    CHECK(s3.choose(qkv()) == algo(2));
    CHECK(newer.refusal_calls == 0);
    CHECK(s3.counts().timed == 1);
    CHECK_FALSE(s3.warnings().empty());
  }
  SECTION("a malformed entry is timed again, with a warning") {
    auto broken = file.load_input();
    for (auto& b : broken) b.config["words"][3] = "not hex";
    const cache::TunedCache bad(broken);
    FakeTrials f;
    tuner::GemmSelector s3(f, gpu(), &bad, {});
    CHECK(s3.choose(qkv()) == algo(2));
    REQUIRE(s3.warnings().size() == 1);
    CHECK_THAT(s3.warnings()[0], Catch::Contains("word 3"));
  }
}

TEST_CASE("gemm selection: a candidate faster by noise alone does not replace the heuristic's first",
          "[tuner][gemm]") {
  FakeTrials fake;
  // 1's median is 0.5 % below 0's, inside the spread of both (each +-1 %); 2 and 3 are clearly slower.
  fake.ms = {{0, 2.0}, {1, 1.99}, {2, 3.0}, {3, 3.5}};
  tuner::GemmSelector s(fake, gpu(), nullptr, nullptr);
  CHECK(s.choose(qkv()) == algo(0));
  CHECK(fake.error_calls == 0);  // the reference itself needs no check
  // Measurably faster (intervals apart) is taken, once it matches the reference.
  FakeTrials faster;
  faster.ms = {{0, 2.0}, {1, 1.5}, {2, 3.0}, {3, 3.5}};
  tuner::GemmSelector t(faster, gpu(), nullptr, nullptr);
  CHECK(t.choose(qkv()) == algo(1));
  CHECK(faster.error_calls == 1);
}

TEST_CASE("gemm selection without timing (a deterministic run): the cache's entry, else the heuristic's first, "
          "nothing timed or stored",
          "[tuner][gemm]") {
  const auto path = test::scratch_dir("gemm_select_untimed") / "tuned.json";
  cache::CacheFile file(path);
  {
    FakeTrials fake;
    tuner::GemmSelector s(fake, gpu(), nullptr, [&](const cache::Entry& e) { file.put(e); });
    REQUIRE(s.choose(qkv()) == algo(2));  // timed: the fastest, stored
  }
  const auto cache = cache::TunedCache::read(path);
  FakeTrials fake;
  int stored = 0;
  tuner::GemmSelector s(fake, gpu(), &cache, [&](const cache::Entry&) { ++stored; }, {.time = false});
  CHECK(s.choose(qkv()) == algo(2));  // the cache's
  GemmDesc wider = qkv();
  wider.n = 256, wider.ldc = 256;
  CHECK(s.choose(wider) == algo(0));  // none cached: the heuristic's first, though 2 is faster
  CHECK(s.choose(wider) == algo(0));
  CHECK(fake.time_calls == 0);
  CHECK(fake.error_calls == 0);
  CHECK(stored == 0);
  CHECK(s.counts().cached == 1);
  CHECK(s.counts().heuristic == 1);
  CHECK(s.counts().timed == 0);
  // An entry the engine refuses: the heuristic's first, said so.
  FakeTrials refusing;
  refusing.refuse = "cublasLtMatmulAlgoCheck returns status 15";
  tuner::GemmSelector r(refusing, gpu(), &cache, {}, {.time = false});
  CHECK(r.choose(qkv()) == algo(0));
  REQUIRE(r.warnings().size() == 1);
  CHECK_THAT(r.warnings()[0], Catch::Contains("status 15") && Catch::Contains("the heuristic's first taken"));
  CHECK(refusing.time_calls == 0);
}

TEST_CASE("gemm selection: nothing that runs is an error, a store that fails a warning", "[tuner][gemm]") {
  FakeTrials fake;
  for (std::uint64_t i = 0; i < 4; ++i) fake.fails[i] = true;
  tuner::GemmSelector s(fake, gpu(), nullptr, {});
  CHECK_THROWS_WITH(s.choose(qkv()), Catch::Contains("no fakeLt 1 algorithm") && Catch::Contains("m=512"));

  FakeTrials ok;
  tuner::GemmSelector t(ok, gpu(), nullptr,
                        [](const cache::Entry&) { throw Error(ErrorKind::kInvalidInput, "tuned.json is read-only"); });
  CHECK(t.choose(qkv()) == algo(2));
  REQUIRE(t.warnings().size() == 1);
  CHECK_THAT(t.warnings()[0], Catch::Contains("not stored") && Catch::Contains("read-only"));
}

TEST_CASE("gemm entries go through a cache file's merge, prune and round trip", "[tuner][gemm][cache]") {
  FakeTrials fake;
  std::vector<cache::Entry> stored;
  tuner::GemmSelector s(fake, gpu(), nullptr, [&](const cache::Entry& e) { stored.push_back(e); });
  s.choose(qkv());
  REQUIRE(stored.size() == 1);
  stored[0].date = "2026-01-01T00:00:00Z";
  stored[0].ktune_version = "0.1.0";
  const std::string text = cache::serialise_cache(stored);
  const auto parsed = cache::parse_cache(text, "gemm.json");
  REQUIRE(parsed.size() == 1);
  CHECK(cache::serialise_cache(parsed) == text);
  // Merged with the golden file's kernel entries: all kept, merging again adds nothing.
  auto golden = cache::CacheFile(std::filesystem::path(KTUNE_SOURCE_DIR) / "tests/cache/golden/tuned_v1.json")
                    .load_input();
  const std::size_t kernels = golden.size();
  CHECK(cache::merge_entries(golden, parsed).changed() == 1);
  CHECK(golden.size() == kernels + 1);
  CHECK(cache::merge_entries(golden, parsed).changed() == 0);
  cache::PruneOptions superseded;
  CHECK(cache::prune_entries(golden, superseded) == 0);
  // Dropping entries of another NVRTC leaves GEMM entries, which compiled nothing.
  cache::PruneOptions other_nvrtc;
  other_nvrtc.nvrtc_version = "12.8";
  CHECK(cache::prune_entries(golden, other_nvrtc) == kernels);
  REQUIRE(golden.size() == 1);
  CHECK(golden[0].key.family == "gemm");
}

TEST_CASE("gemm selection: mixed-precision GEMMs are timed and checked at bf16's tolerance", "[tuner][gemm]") {
  GemmDesc bf16_f32 = qkv();
  bf16_f32.a_type = bf16_f32.b_type = templates::DType::kBF16;  // bf16 operands, fp32 C (a weight gradient)
  GemmDesc bf16 = bf16_f32;
  bf16.c_type = templates::DType::kBF16;  // bf16 C (an activation)
  CHECK(tuner::gemm_tolerance(bf16_f32) == templates::tolerance_for("bf16"));
  CHECK(tuner::gemm_tolerance(bf16) == templates::tolerance_for("bf16"));
  GemmDesc tf32 = qkv();
  tf32.tf32 = true;
  CHECK(tuner::gemm_tolerance(tf32) == templates::tolerance_for("tf32"));
  CHECK(tuner::gemm_tolerance(qkv()) == templates::tolerance_for("f32"));

  // An algorithm 3e-3 from the reference: within bf16's rounding, not fp32's.
  for (const GemmDesc& g : {bf16_f32, bf16, qkv()}) {
    INFO(tuner::gemm_dtype(g));
    FakeTrials fake;
    fake.wrong[2] = 3e-3;
    tuner::GemmSelector s(fake, gpu(), nullptr, {});
    const bool mixed = g.a_type == templates::DType::kBF16;
    CHECK(s.choose(g) == (mixed ? algo(2) : algo(1)));
    CHECK(s.counts().rejected == (mixed ? 0 : 1));
  }
}

TEST_CASE("gemm selection: without the memory for trial operands the heuristic's first runs, with a warning, and "
          "operands made are freed once the choice is made",
          "[tuner][gemm]") {
  const auto path = test::scratch_dir("gemm_select_memory") / "tuned.json";
  cache::CacheFile file(path);
  FakeTrials fake;
  fake.out_of_memory = true;
  {
    tuner::GemmSelector s(fake, gpu(), nullptr, [&](const cache::Entry& e) { file.put(e); });
    // Not "no algorithm ran and matched the reference", every candidate counted as refused, and the run ended.
    CHECK(s.choose(qkv()) == algo(0));
    CHECK(fake.time_calls == 0);
    CHECK(s.counts().rejected == 0);
    CHECK(s.counts().heuristic == 1);
    REQUIRE(s.warnings().size() == 1);
    CHECK_THAT(s.warnings()[0], Catch::Contains("is not timed (cuMemAlloc failed: out of memory (GEMM trial A))"));
    CHECK_FALSE(std::filesystem::exists(path));  // an untimed choice is not kept
  }
  fake.out_of_memory = false;
  tuner::GemmSelector s(fake, gpu(), nullptr, nullptr);
  CHECK(s.choose(qkv()) == algo(2));  // the fastest
  CHECK(fake.prepared == 1);
  CHECK(fake.released == 1);
}

}  // namespace tuner_gemm_select_test
