// Cache lookup (exact, nearest shape, stale warnings) and the merge rule.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <tuple>

#include "cache/store.hpp"
#include "cache/tuned_cache.hpp"
#include "support.hpp"

namespace cache_lookup_test {

using namespace ktune::cache;

namespace {
Key key_for(std::int64_t numel, std::int64_t tensors = 4) {
  return {"adamw", "h1", "f32;numel=" + std::to_string(numel) + ";tensors=" + std::to_string(tensors),
          "f32", "sm_90", "NVIDIA H100", "13.0", "13000", {{"numel", numel}, {"tensors", tensors}}};
}
Entry entry_for(const Key& key, int block, double time_ms = 1.0, double spread = 0.02) {
  Entry e;
  e.key = key;
  e.config = {{"block", block}};
  e.time_ms = time_ms;
  e.p20_ms = time_ms * (1 - spread / 2);
  e.p80_ms = time_ms * (1 + spread / 2);
  e.spread = spread;
  e.evaluations = 10;
  e.repetitions = 20;
  e.date = "2025-01-01T00:00:00Z";
  return e;
}
}  // namespace

TEST_CASE("lookup: exact, then nearest shape with its distance, then none", "[cache]") {
  const std::vector<Entry> entries = {entry_for(key_for(1 << 10), 128), entry_for(key_for(1 << 20), 512),
                                      entry_for(key_for(1 << 14, 1), 256)};
  SECTION("exact") {
    const auto r = lookup(entries, key_for(1 << 20));
    CHECK(r.match == Match::kExact);
    CHECK(r.entry->config["block"] == 512);
    CHECK(r.distance == 0);
  }
  SECTION("nearest on log-scaled dims") {
    const auto r = lookup(entries, key_for(1 << 17));  // closer to 2^20 than to 2^10 in log2
    REQUIRE(r.match == Match::kNearest);
    CHECK(r.entry->config["block"] == 512);
    CHECK(r.distance == Approx(3.0).epsilon(0.01));
  }
  SECTION("nearest honours the accept filter") {
    LookupOptions options;
    options.accept = [](const Entry& e) { return e.config["block"] != 512; };
    const auto r = lookup(entries, key_for(1 << 17), options);
    REQUIRE(r.match == Match::kNearest);
    CHECK(r.entry->config["block"] != 512);
  }
  SECTION("an entry whose dims are not its problem key's is no nearest shape, and is named") {
    std::vector<Entry> edited = entries;
    for (auto& e : edited) e.key.dims["numel"] = 1 << 17;  // the query's numel, in the dims alone
    const auto r = lookup(edited, key_for(1 << 17));
    CHECK(r.match == Match::kNone);
    REQUIRE(r.warnings.size() == 3);
    CHECK_THAT(r.warnings[0], Catch::Contains("passing over the cache entry for adamw f32;numel=1024;tensors=4 as a "
                                              "nearest shape: its dims {\"numel\":131072,\"tensors\":4} are not "
                                              "its problem key's"));
    // Its exact key still matches.
    CHECK(lookup(edited, edited[1].key).match == Match::kExact);
  }
  SECTION("other dtype, arch or family: none") {
    Key q = key_for(1 << 20);
    q.dtype = "bf16";
    q.problem_key = "bf16;numel=1048576;tensors=4";
    CHECK(lookup(entries, q).match == Match::kNone);
    q = key_for(1 << 18);
    q.arch = "sm_80";
    CHECK(lookup(entries, q).match == Match::kNone);
    q = key_for(1 << 18);
    q.family = "softmax";
    CHECK(lookup(entries, q).match == Match::kNone);
  }
  SECTION("nearest can be switched off") {
    LookupOptions options;
    options.allow_nearest = false;
    CHECK(lookup(entries, key_for(1 << 17), options).match == Match::kNone);
  }
}

TEST_CASE("stale entries are ignored with a warning", "[cache]") {
  Key old_key = key_for(1 << 20);
  old_key.source_hash = "h0";
  const std::vector<Entry> entries = {entry_for(old_key, 512)};
  const auto r = lookup(entries, key_for(1 << 20));
  CHECK(r.match == Match::kNone);  // not exact, and stale entries are no fallback either
  REQUIRE(r.warnings.size() == 1);
  CHECK_THAT(r.warnings[0], Catch::Contains("stale") && Catch::Contains("source hash h0"));

  Key nvrtc_key = key_for(1 << 20);
  nvrtc_key.nvrtc_version = "12.8";
  const auto r2 = lookup({entry_for(nvrtc_key, 512)}, key_for(1 << 20));
  CHECK(r2.match == Match::kNone);
  REQUIRE(r2.warnings.size() == 1);
  CHECK_THAT(r2.warnings[0], Catch::Contains("NVRTC 12.8"));
}

TEST_CASE("an entry of another driver stands in as a nearest one, after this driver's of the same distance",
          "[cache]") {
  // A driver upgrade runs the same compiled code: the fleet's entries go on serving until tuned again.
  Key driver_key = key_for(1 << 20);
  driver_key.driver_version = "12080";
  const Entry old_driver = entry_for(driver_key, 512);
  const auto r = lookup({old_driver}, key_for(1 << 20));
  CHECK(r.match == Match::kNearest);
  CHECK(r.distance == 0);
  CHECK(r.warnings.empty());
  CHECK(r.entry->config["block"] == 512);
  // This driver's entry of another shape is further: the problem's own entry of the other driver is taken.
  const Entry other_shape = entry_for(key_for(1 << 21), 256);
  CHECK(lookup({other_shape, old_driver}, key_for(1 << 20)).entry->config["block"] == 512);
  // At the same distance this driver's entry goes first, in either order.
  Key same_driver_key = key_for(1 << 20);
  same_driver_key.gpu_name = "NVIDIA H100 PCIe";  // another GPU of the arch: nearest at distance 0 too
  const Entry same_driver = entry_for(same_driver_key, 128);
  CHECK(lookup({old_driver, same_driver}, key_for(1 << 20)).entry->config["block"] == 128);
  CHECK(lookup({same_driver, old_driver}, key_for(1 << 20)).entry->config["block"] == 128);
  // Where nearest shapes are not taken (a GEMM's algorithm), it is stale, with the warning.
  LookupOptions exact_only;
  exact_only.allow_nearest = false;
  const auto e = lookup({old_driver}, key_for(1 << 20), exact_only);
  CHECK(e.match == Match::kNone);
  REQUIRE(e.warnings.size() == 1);
  CHECK_THAT(e.warnings[0], Catch::Contains("driver 12080 (now 13000)"));
  // The run-time service says so in its reason.
  const TunedCache cache({old_driver}, "fleet.json");
  CHECK_THAT(cache.lookup(key_for(1 << 20)).reason, Catch::Contains("under driver 12080 (now 13000)"));
}

TEST_CASE("the host emulation's entries never stand in for a GPU's, nor a GPU's for the emulation's", "[cache]") {
  // The emulation times the host (no driver: version 0); its winner says nothing of a GPU, even at distance 0.
  Key emulated = key_for(1 << 20);
  emulated.gpu_name = "host emulation (sm_90 limits)";
  emulated.driver_version = "0";
  const Entry on_host = entry_for(emulated, 64);
  const Entry on_gpu = entry_for(key_for(1 << 24), 512);  // this GPU's, of a shape further away
  CHECK(lookup({on_host}, key_for(1 << 20)).match == Match::kNone);
  CHECK(lookup({on_host, on_gpu}, key_for(1 << 20)).entry->config["block"] == 512);
  Key host_query = key_for(1 << 22);
  host_query.gpu_name = emulated.gpu_name;
  host_query.driver_version = "0";
  CHECK(lookup({on_gpu}, host_query).match == Match::kNone);
  CHECK(lookup({on_gpu, on_host}, host_query).entry->config["block"] == 64);
}

TEST_CASE("merge keeps the faster entry, or the better measured within the noise", "[cache]") {
  const Key k = key_for(1 << 20);
  SECTION("clearly faster wins") {
    CHECK(better_than(entry_for(k, 1, 1.0), entry_for(k, 2, 2.0)));
    CHECK_FALSE(better_than(entry_for(k, 2, 2.0), entry_for(k, 1, 1.0)));
  }
  SECTION("overlapping: lower spread wins, then more repetitions") {
    const Entry tight = entry_for(k, 1, 1.01, 0.02);
    const Entry loose = entry_for(k, 2, 1.00, 0.10);
    CHECK(better_than(tight, loose));
    Entry more = entry_for(k, 3, 1.0, 0.02);
    more.repetitions = 100;
    CHECK(better_than(more, entry_for(k, 4, 1.0, 0.02)));
  }
  SECTION("of any number of entries, the one kept is the same in every order, and merging again keeps it") {
    // Three measurements where comparing intervals pairwise went round in a circle: a beat b (overlapping,
    // tighter), b beat c (disjoint, faster), c beat a (overlapping, tighter).
    Entry a = entry_for(k, 1, 2.1), b = entry_for(k, 2, 1.8), c = entry_for(k, 3, 2.16);
    std::tie(a.p20_ms, a.p80_ms, a.spread) = std::make_tuple(2.0, 2.2, 0.2 / 2.1);
    std::tie(b.p20_ms, b.p80_ms, b.spread) = std::make_tuple(1.5, 2.1, 0.6 / 1.8);
    std::tie(c.p20_ms, c.p80_ms, c.spread) = std::make_tuple(2.15, 2.17, 0.02 / 2.16);
    const auto by_config = [](const Entry& x, const Entry& y) { return x.config.dump() < y.config.dump(); };
    std::vector<Entry> order{a, b, c};
    std::sort(order.begin(), order.end(), by_config);
    std::set<int> kept;
    do {
      std::vector<Entry> into;
      merge_entries(into, order);
      REQUIRE(into.size() == 1);
      kept.insert(into.front().config["block"].get<int>());
      CHECK(merge_entries(into, order).changed() == 0);  // again: nothing changes
      std::vector<Entry> duplicates = order;   // a file holding all three: the lookup takes the same one
      CHECK(lookup(duplicates, k).entry->config == into.front().config);
      collapse_duplicates(duplicates);
      CHECK(duplicates.front().config == into.front().config);
    } while (std::next_permutation(order.begin(), order.end(), by_config));
    CHECK(kept == std::set<int>{2});  // b: the lowest slow end, 2.1 ms
  }
  SECTION("files from two hosts combine") {
    const auto dir = ktune::test::scratch_dir("cache-merge");
    CacheFile a(dir / "a.json"), b(dir / "b.json");
    a.put(entry_for(key_for(1 << 10), 128, 1.0));
    a.put(entry_for(k, 256, 2.0));
    b.put(entry_for(k, 512, 1.0));
    Key other_gpu = key_for(1 << 10);
    other_gpu.gpu_name = "NVIDIA A100";
    other_gpu.arch = "sm_80";
    b.put(entry_for(other_gpu, 64, 1.0));
    CHECK(a.merge_from(b.load()) == 2);
    const auto merged = a.load();
    REQUIRE(merged.size() == 3);
    CHECK(lookup(merged, k).entry->config["block"] == 512);
    CHECK(a.merge_from(b.load()) == 0);  // idempotent
  }
}

}  // namespace cache_lookup_test
