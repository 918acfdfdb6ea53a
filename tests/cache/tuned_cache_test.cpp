// The tuned cache as a run-time service: one parse, answers with a reason,
// warnings returned (never printed), the key built in one place.
#include "cache/tuned_cache.hpp"

#include <catch2/catch.hpp>

#include <filesystem>

#include "base/error.hpp"
#include "cache/key.hpp"
#include "support.hpp"
#include "templates/family.hpp"

namespace cache_tuned_cache_test {

using namespace ktune;
using namespace ktune::cache;

namespace {
const templates::Family& family() { return templates::find_family("rmsnorm_fwd"); }
templates::Problem problem(std::int64_t rows) { return {"f32", {{"rows", rows}, {"dim", 768}}}; }
Key key_for(std::int64_t rows) {
  return make_key(family(), problem(rows), DeviceLimits::for_arch("sm_90"), "13.0");
}
Entry entry_for(const Key& key, int threads) {
  Entry e;
  e.key = key;
  e.config = {{"threads", threads}, {"row_threads", 32}, {"vec", 4}};
  e.time_ms = 1.0;
  e.p20_ms = 0.99;
  e.p80_ms = 1.01;
  e.spread = 0.02;
  e.repetitions = 20;
  e.evaluations = 10;
  return e;
}
}  // namespace

TEST_CASE("cache key: built from the family, problem and device", "[cache]") {
  const Key k = key_for(4096);
  CHECK(k.family == "rmsnorm_fwd");
  CHECK(k.source_hash == family().source_hash());
  CHECK(k.problem_key == problem(4096).key());
  CHECK(k.dtype == "f32");
  CHECK(k.arch == "sm_90");
  CHECK(k.gpu_name == DeviceLimits::for_arch("sm_90").name);
  CHECK(k.nvrtc_version == "13.0");
  CHECK(k.dims == problem(4096).dims);
}

TEST_CASE("tuned cache: exact, nearest and default, each with its reason", "[cache]") {
  const TunedCache cache({entry_for(key_for(4096), 256), entry_for(key_for(64), 128)}, "mem");
  SECTION("exact") {
    const Answer a = cache.lookup(key_for(4096));
    CHECK(a.result.match == Match::kExact);
    CHECK(a.result.entry->config["threads"] == 256);
    CHECK(a.reason == "exact");
  }
  SECTION("nearest names the distance and the tuned problem") {
    const Answer a = cache.lookup(key_for(2048));
    REQUIRE(a.result.match == Match::kNearest);
    CHECK(a.result.entry->config["threads"] == 256);
    CHECK_THAT(a.reason, Catch::StartsWith("nearest (distance 1.00, tuned for f32;dim=768;rows=4096"));
  }
  SECTION("a filter can refuse the nearest candidates") {
    const Answer a = cache.lookup(key_for(2048), [](const Entry& e) { return e.config["threads"] == 128; });
    REQUIRE(a.result.match == Match::kNearest);
    CHECK(a.result.entry->config["threads"] == 128);
  }
  SECTION("another family: the default") {
    Key other = key_for(4096);
    other.family = "rmsnorm_bwd";
    const Answer a = cache.lookup(other);
    CHECK(a.result.match == Match::kNone);
    CHECK(a.reason == "default (no usable tuned entry)");
  }
  SECTION("an empty cache: the default") {
    CHECK(TunedCache().lookup(key_for(4096)).reason == "default (no tuned cache)");
  }
}

TEST_CASE("tuned cache: stale entries come back as warnings", "[cache]") {
  Entry stale = entry_for(key_for(4096), 256);
  stale.key.source_hash = "an older template";
  const TunedCache cache({stale});
  const Answer a = cache.lookup(key_for(4096));
  CHECK(a.result.match == Match::kNone);
  REQUIRE(a.result.warnings.size() == 1);
  CHECK_THAT(a.result.warnings[0], Catch::Contains("ignoring stale cache entry for rmsnorm_fwd"));
  // The run-time API's reason says why the entry went unused.
  CHECK_THAT(a.reason, Catch::StartsWith("default (no usable tuned entry: ignoring stale cache entry") &&
                           Catch::Contains("source hash an older template"));
}

TEST_CASE("tuned cache: a nearest entry another GPU of the arch tuned names that GPU", "[cache]") {
  Entry other_gpu = entry_for(key_for(2048), 256);
  other_gpu.key.gpu_name = "another GPU";
  const Answer a = TunedCache({other_gpu}).lookup(key_for(4096));
  REQUIRE(a.result.match == Match::kNearest);
  CHECK_THAT(a.reason, Catch::EndsWith(" on another GPU)"));
  CHECK_THAT(TunedCache({entry_for(key_for(2048), 256)}).lookup(key_for(4096)).reason,
             !Catch::Contains(" on "));
}

TEST_CASE("tuned cache: the file is parsed once", "[cache]") {
  const auto path = test::scratch_dir("tuned_cache") / "tuned.json";
  CacheFile(path).put(entry_for(key_for(4096), 256));
  const TunedCache cache = TunedCache::read(path);
  CHECK(cache.origin() == path.string());
  std::filesystem::remove(path);  // lookups never go back to the file
  CHECK(cache.lookup(key_for(4096)).result.match == Match::kExact);
  CHECK(cache.entries().size() == 1);
  CHECK_THROWS_AS(TunedCache::read(path), Error);
}

}  // namespace cache_tuned_cache_test
