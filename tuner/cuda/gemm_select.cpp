// GEMM algorithm selection by timing, cached (see gemm_select.hpp).
#include "tuner/cuda/gemm_select.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "base/error.hpp"
#include "cache/store.hpp"
#include "search/winner.hpp"
#include "templates/common/family_helpers.hpp"
#include "templates/problem.hpp"
#include "templates/render.hpp"
#include "templates/workload.hpp"
#include "tuner/exec/backend.hpp"

namespace ktune::tuner {

std::string gemm_dtype(const GemmDesc& g) {
  using templates::DType;
  if (g.a_type == DType::kF32 && g.b_type == DType::kF32 && g.c_type == DType::kF32) return g.tf32 ? "tf32" : "f32";
  // Mixed operands: A and B's type, then C's when it differs ("bf16", "bf16_f32").
  const std::string a = templates::to_string(g.a_type), b = templates::to_string(g.b_type),
                    c = templates::to_string(g.c_type);
  const std::string ab = a == b ? a : a + "_" + b;
  return c == a && c == b ? ab : ab + "_" + c;
}

double gemm_tolerance(const GemmDesc& g) {
  // A bf16 operand bounds the precision whatever C's type ("bf16_f32" has bf16's tolerance).
  const bool bf16 = g.a_type == templates::DType::kBF16 || g.b_type == templates::DType::kBF16 ||
                    g.c_type == templates::DType::kBF16;
  return templates::tolerance_for(bf16 ? "bf16" : g.tf32 ? "tf32" : "f32");
}

namespace {

// The numbers a GEMM's key names besides its dtype, in kGemmKeyNames' order:
// gemm_key writes them with their names, GemmSelector's in-run memo keeps
// them as they are (no key text built per call).
constexpr std::array<const char*, 16> kGemmKeyNames = {
    "m",   "n",        "k",        "trans_a",  "trans_b", "batch",   "lda",     "ldb",
    "ldc", "stride_a", "stride_b", "stride_c", "align_a", "align_b", "align_c", "accumulate"};

std::array<std::int64_t, 16> gemm_key_values(const GemmDesc& g) {
  return {g.m,
          g.n,
          g.k,
          g.trans_a ? 1 : 0,
          g.trans_b ? 1 : 0,
          g.batch,
          g.lda,
          g.ldb,
          g.ldc,
          g.batch > 1 ? g.stride_a : 0,
          g.batch > 1 ? g.stride_b : 0,
          g.batch > 1 ? g.stride_c : 0,
          gemm_alignment(g.a, g.batch, g.stride_a, g.a_type),
          gemm_alignment(g.b, g.batch, g.stride_b, g.b_type),
          gemm_alignment(g.c, g.batch, g.stride_c, g.c_type),
          g.beta != 0 ? 1 : 0};
}

}  // namespace

cache::Key gemm_key(const GemmDesc& g, const DeviceLimits& device, const std::string& library) {
  templates::Problem p{gemm_dtype(g), {}};
  const auto values = gemm_key_values(g);
  for (std::size_t i = 0; i < values.size(); ++i) p.dims[kGemmKeyNames[i]] = values[i];
  cache::Key k;
  k.family = kGemmFamily;
  k.source_hash = library;
  k.problem_key = p.key();
  k.dtype = p.dtype;
  k.arch = device.arch;
  k.gpu_name = device.name;
  k.nvrtc_version = "";  // nothing is compiled
  k.driver_version = std::to_string(device.driver_version);
  k.dims = p.dims;
  return k;
}

nlohmann::json to_json(const GemmAlgo& algo) {
  nlohmann::json words = nlohmann::json::array();
  for (const auto w : algo.words) words.push_back(fmt::format("{:016x}", w));
  nlohmann::json j = {{"words", words}};
  for (const auto& [name, value] : algo.attributes) j[name] = value;
  return j;
}

std::optional<GemmAlgo> gemm_algo_from_json(const nlohmann::json& config, std::string& why) {
  GemmAlgo algo;
  if (!config.is_object() || !config.contains("words") || !config["words"].is_array() ||
      config["words"].size() != algo.words.size()) {
    why = fmt::format("config field 'words' must be an array of {} hex strings", algo.words.size());
    return std::nullopt;
  }
  for (std::size_t i = 0; i < algo.words.size(); ++i) {
    const auto& w = config["words"][i];
    const std::string text = w.is_string() ? w.get<std::string>() : "";
    const bool hex = text.size() == 16 && text.find_first_not_of("0123456789abcdef") == std::string::npos;
    if (!hex) {
      why = fmt::format("config word {} is not 16 lower-case hex digits", i);
      return std::nullopt;
    }
    algo.words[i] = std::stoull(text, nullptr, 16);
  }
  for (const auto& [name, value] : config.items()) {
    if (name == "words" || name.rfind("heuristic_", 0) == 0) continue;
    const auto v = cache::exact_int64(value);
    if (!v) {
      why = fmt::format("config attribute '{}' is not an integer", name);
      return std::nullopt;
    }
    algo.attributes[name] = *v;
  }
  return algo;
}

namespace {

// Device operands of one trial, laid out as g's (same leading dimensions,
// strides, address alignment and element types: fp32, or bf16 for the mixed
// precision GEMMs), filled with fresh random values.
struct Operands {
  std::unique_ptr<exec::Buffer> a, b, c;
  GemmDesc desc;
  std::vector<std::byte> c_initial;  // C's initial contents, in C's type

  Operands(exec::Backend& backend, const GemmDesc& g, std::uint64_t seed) : desc(g) {
    check_gemm_types(g);
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> u(-1, 1);
    const auto make = [&](std::int64_t span, std::uint64_t address, templates::DType type, const char* label,
                          std::vector<std::byte>* keep) {
      std::vector<double> values(static_cast<std::size_t>(span));
      for (auto& v : values) v = u(rng);
      std::vector<std::byte> bytes = templates::input_buffer(label, type, values).bytes;
      // 256 bytes more, so the operand can start at address's offset in a 256-byte line.
      auto buffer = backend.allocate(bytes.size() + 256, label);
      const std::size_t offset = address % 256;
      backend.upload_range(*buffer, offset, bytes.data(), bytes.size());
      if (keep) *keep = std::move(bytes);
      return std::pair{std::move(buffer), offset};
    };
    auto [ba, oa] = make(g.span_a(), g.a, g.a_type, "GEMM trial A", nullptr);
    auto [bb, ob] = make(g.span_b(), g.b, g.b_type, "GEMM trial B", nullptr);
    auto [bc, oc] = make(g.span_c(), g.c, g.c_type, "GEMM trial C", &c_initial);
    a = std::move(ba), b = std::move(bb), c = std::move(bc);
    desc.a = a->address() + oa;
    desc.b = b->address() + ob;
    desc.c = c->address() + oc;
  }
  std::size_t c_offset() const { return static_cast<std::size_t>(desc.c - c->address()); }
  /// Writes C's initial contents back (an accumulating GEMM reads them).
  void restore_c(exec::Backend& backend) const {
    backend.upload_range(*c, c_offset(), c_initial.data(), c_initial.size());
  }
  /// C as doubles.
  std::vector<double> read_c(exec::Backend& backend) const {
    std::vector<std::byte> bytes(c_initial.size());
    backend.download_range(bytes.data(), *c, c_offset(), bytes.size());
    std::vector<double> out(bytes.size() / templates::size_of(desc.c_type));
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = templates::value_at(desc.c_type, bytes, i);
    return out;
  }
};

class CublasLtTrials final : public GemmTrials {
 public:
  CublasLtTrials(exec::Backend& backend, CublasLt& lt, RunOptions timing)
      : backend_(backend), lt_(lt), timing_(timing) {}

  std::string library() const override { return CublasLt::version(); }
  std::vector<GemmAlgo> candidates(const GemmDesc& g, int count) override { return lt_.algorithms(g, count); }
  std::string refusal(const GemmDesc& g, const GemmAlgo& algo) override { return lt_.refusal(g, algo); }

  // One set of operands for every candidate of a GEMM: the same data for
  // each, and made once (at the 2.7B size a set is ~35 million random values).
  // The timing's own memory (the L2 flush) is held with them, so that what
  // cannot be allocated beside a run's buffers is found here, before any
  // candidate runs.
  void prepare(const GemmDesc& g) override {
    if (operands_ && operands_for_ == g) return;
    release();
    backend_.hold_timing_memory(true);
    try {
      operands_ = std::make_unique<Operands>(backend_, g, ++seed_);
    } catch (...) {
      backend_.hold_timing_memory(false);
      throw;
    }
    operands_for_ = g;
  }
  void release() override {
    operands_.reset();
    backend_.hold_timing_memory(false);
  }

  Measurement time(const GemmDesc& g, const GemmAlgo& algo) override {
    const Operands& ops = prepared(g);
    return backend_.time([&] { lt_.matmul(ops.desc, backend_.native_stream(), algo); }, timing_,
                         fmt::format("GEMM m={} n={} k={} batch={}", g.m, g.n, g.k, g.batch));
  }

  double error(const GemmDesc& g, const GemmAlgo& algo, const GemmAlgo& reference) override {
    const Operands& ops = prepared(g);
    const auto run = [&](const GemmAlgo& which) {
      // beta = 0 never reads C: poisoned, so an entry left unwritten is NaN.
      if (g.beta == 0) backend_.poison(*ops.c);
      else ops.restore_c(backend_);
      lt_.matmul(ops.desc, backend_.native_stream(), which);
      return ops.read_c(backend_);
    };
    const std::vector<double> want = run(reference), got = run(algo);
    double num = 0, den = 0;
    for (std::int64_t b = 0; b < g.batch; ++b)
      for (std::int64_t i = 0; i < g.m; ++i)
        for (std::int64_t j = 0; j < g.n; ++j) {
          const std::size_t at = static_cast<std::size_t>(b * g.stride_c + i * g.ldc + j);
          const double d = got[at] - want[at];
          num += d * d;
          den += want[at] * want[at];
        }
    const double e = std::sqrt(num / std::max(den, std::numeric_limits<double>::min()));
    return std::isfinite(e) ? e : std::numeric_limits<double>::infinity();
  }

 private:
  const Operands& prepared(const GemmDesc& g) const {
    if (!operands_ || !(operands_for_ == g))
      throw Error(ErrorKind::kInternal, "GEMM trials: the operands were not prepared for this GEMM");
    return *operands_;
  }

  exec::Backend& backend_;
  CublasLt& lt_;
  RunOptions timing_;
  std::uint64_t seed_ = 0;
  std::unique_ptr<Operands> operands_;  ///< what time() and error() run operands_for_ on
  GemmDesc operands_for_;
};

}  // namespace

std::unique_ptr<GemmTrials> make_cublaslt_trials(exec::Backend& backend, CublasLt& lt, RunOptions timing) {
  return std::make_unique<CublasLtTrials>(backend, lt, timing);
}

GemmSelector::GemmSelector(GemmTrials& trials, DeviceLimits device, const cache::TunedCache* cache, Store store,
                           GemmSelectOptions options)
    : trials_(trials),
      device_(std::move(device)),
      library_(trials.library()),
      cache_(cache),
      store_(std::move(store)),
      options_(options) {
  KTUNE_REQUIRE(options_.candidates >= 1,
                fmt::format("GEMM candidates per shape must be at least 1, got {}", options_.candidates));
}

const GemmAlgo& GemmSelector::choose(const GemmDesc& g) {
  // What gemm_key names: every GEMM call looks here first, so no key text is
  // built once a GEMM has its algorithm.
  const Signature signature = {gemm_dtype(g), gemm_key_values(g)};
  if (const auto it = chosen_.find(signature); it != chosen_.end()) return it->second;
  const cache::Key key = gemm_key(g, device_, library_);
  std::optional<GemmAlgo> algo = from_cache(g, key);
  if (algo) {
    ++counts_.cached;
  } else if (!options_.time) {
    const std::vector<GemmAlgo> first = trials_.candidates(g, 1);
    if (first.empty())
      throw Error(ErrorKind::kCuda, fmt::format("{} offers no algorithm for GEMM {}", library_, key.problem_key));
    algo = first.front();
    ++counts_.heuristic;
  } else {
    algo = timed(g, key);
  }
  return chosen_.emplace(signature, std::move(*algo)).first->second;
}

std::optional<GemmAlgo> GemmSelector::from_cache(const GemmDesc& g, const cache::Key& key) {
  if (!cache_) return std::nullopt;
  cache::LookupOptions exact_only;
  exact_only.allow_nearest = false;  // an algorithm holds for its exact shape only
  auto found = cache::lookup(cache_->entries(), key, exact_only);
  for (auto& w : found.warnings) warnings_.push_back(std::move(w));
  if (found.match != cache::Match::kExact) return std::nullopt;
  std::string why;
  auto algo = gemm_algo_from_json(found.entry->config, why);
  if (algo) why = trials_.refusal(g, *algo);
  if (why.empty()) return algo;
  warnings_.push_back(fmt::format("gemm entry {} is not usable ({}); {}", key.problem_key, why,
                                  options_.time ? "timed again" : "the heuristic's first taken"));
  return std::nullopt;
}

GemmAlgo GemmSelector::timed(const GemmDesc& g, const cache::Key& key) {
  const std::vector<GemmAlgo> candidates = trials_.candidates(g, options_.candidates);
  if (candidates.empty())
    throw Error(ErrorKind::kCuda, fmt::format("{} offers no algorithm for GEMM {}", library_, key.problem_key));
  struct Timed {
    std::size_t rank;
    Measurement m;
  };
  // The operands, outside the candidates' failures: where they cannot be made (no device memory left for a
  // copy of the GEMM's), the heuristic's first runs, untimed, and a warning says why, where every candidate
  // was counted refused and the run ended. Freed once the choice is made.
  try {
    trials_.prepare(g);
  } catch (const Error& e) {
    warnings_.push_back(fmt::format("GEMM {} is not timed ({}): the heuristic's first algorithm runs it",
                                    key.problem_key, e.what()));
    ++counts_.heuristic;
    return candidates.front();
  }
  struct Release {
    GemmTrials& trials;
    ~Release() { trials.release(); }
  } release{trials_};
  std::vector<Timed> runs;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    try {
      runs.push_back({i, trials_.time(g, candidates[i])});
    } catch (const Error&) {
      ++counts_.rejected;  // a candidate that fails to run is a result, not the end of the run
    }
  }
  // The winner rule of the tuning sessions (search/winner.cpp) over the candidates that ran, the heuristic's
  // order breaking ties, so one faster by noise alone does not replace the heuristic's first; the winner is
  // checked against the reference before it is kept, else the rule picks among the rest.
  const double tolerance = gemm_tolerance(g);
  double heuristic_ms = -1;
  for (const Timed& r : runs)
    if (r.rank == 0) heuristic_ms = r.m.median_ms;
  while (!runs.empty()) {
    std::vector<search::Candidate> finalists;
    for (const Timed& r : runs) finalists.push_back({r.rank, Config(), r.m.samples_ms});
    const search::WinnerResult w = search::pick_winner(finalists);
    const auto at = static_cast<std::ptrdiff_t>(w.found ? w.winner : 0);
    const Timed t = runs[static_cast<std::size_t>(at)];
    if (t.rank != 0) {  // the heuristic's first is the reference itself
      double error = std::numeric_limits<double>::infinity();
      try {
        error = trials_.error(g, candidates[t.rank], candidates[0]);
      } catch (const Error&) {
      }
      if (!(error <= tolerance)) {
        ++counts_.rejected;
        runs.erase(runs.begin() + at);
        continue;
      }
    }
    ++counts_.timed;
    cache::Entry e;
    e.key = key;
    e.config = to_json(candidates[t.rank]);
    e.config["heuristic_rank"] = t.rank;
    if (heuristic_ms >= 0) e.config["heuristic_ms"] = heuristic_ms;
    e.time_ms = t.m.median_ms;
    e.p20_ms = t.m.p20_ms;
    e.p80_ms = t.m.p80_ms;
    e.spread = t.m.median_ms > 0 ? (t.m.p80_ms - t.m.p20_ms) / t.m.median_ms : 0;
    e.evaluations = static_cast<std::int64_t>(candidates.size());
    e.repetitions = t.m.repetitions;
    if (store_) {
      try {
        store_(e);
      } catch (const Error& err) {
        warnings_.push_back(fmt::format("GEMM choices are not stored: {}", err.what()));
        store_ = nullptr;
      }
    }
    return candidates[t.rank];
  }
  throw Error(ErrorKind::kCuda,
              fmt::format("no {} algorithm for GEMM {} ran and matched the reference", library_, key.problem_key));
}

}  // namespace ktune::tuner
