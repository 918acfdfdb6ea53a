#include "tuner/compile/compile_check.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <random>

#include "base/hash.hpp"
#include "tuner/exec/backend.hpp"

namespace ktune::tuner {

std::string CompileCheckSummary::line() const {
  const std::string arch = rows.empty() ? "" : rows.front().result.arch;
  // The binary cache holds sources: variants that render the same source share one.
  return fmt::format("compiled {} variants ({} unique sources, {} of them cached) for {}: {} failures, {} invalid "
                     "(constraints), {:.1f} s",
                     rows.size() - not_compiled, unique_sources, cache_hits, arch, failures, invalid, seconds);
}

namespace {

constexpr std::size_t kNoSource = ~std::size_t{0};  // a row not compiled: its failure says why

/// The defaults of one family and problem on the arch: default_config, and
/// arch_default where the family has one valid there.
std::vector<Config> defaults_for(const templates::Family& f, const templates::Problem& p,
                                 const templates::DeviceLimits& limits) {
  std::vector<Config> out{f.default_config(p)};
  if (auto arch = f.arch_default(p, limits); arch && *arch != out[0] && f.is_valid(*arch, p, limits))
    out.push_back(*arch);
  return out;
}

}  // namespace

std::vector<Config> configs_to_check(const templates::Family& f, const templates::Problem& p,
                                     const templates::DeviceLimits& limits, const CompileCheckOptions& o,
                                     std::size_t& invalid) {
  const std::vector<Config> defaults = defaults_for(f, p, limits);
  std::vector<Config> out = defaults;
  if (o.which == CompileCheckOptions::Which::kDefaults) return out;
  std::vector<Config> valid;
  for (std::uint64_t i = 0; i < f.space().size(); ++i) {
    Config c = f.space().at(i);
    if (!f.is_valid(c, p, limits)) ++invalid;
    else if (std::find(defaults.begin(), defaults.end(), c) == defaults.end()) valid.push_back(std::move(c));
  }
  if (o.which == CompileCheckOptions::Which::kSample && o.sample < valid.size()) {
    // Each pick is uniform over the valid points not yet picked, in the order drawn.
    std::mt19937_64 rng(o.seed ^ std::hash<std::string>{}(f.name() + p.key()));
    for (std::size_t k = 0; k < o.sample; ++k)
      std::swap(valid[k], valid[k + static_cast<std::size_t>(rng() % (valid.size() - k))]);
    valid.resize(static_cast<std::size_t>(o.sample));
  }
  out.insert(out.end(), std::make_move_iterator(valid.begin()), std::make_move_iterator(valid.end()));
  return out;
}

CompileCheckSummary compile_check(const std::vector<const templates::Family*>& families_in,
                                  const CompileCheckOptions& o, const Compiler& compiler) {
  const auto start = std::chrono::steady_clock::now();
  const auto& families = families_in.empty() ? templates::all_families() : families_in;
  const auto limits = templates::DeviceLimits::for_arch(o.arch);
  CompileCheckSummary s;
  std::vector<templates::Rendered> sources;
  std::map<std::string, std::size_t> source_index;  // hash of source + kernels -> index in `sources`
  std::vector<std::size_t> row_source;
  std::vector<const templates::Family*> row_family;
  for (const auto* f : families) {
    for (const auto& p : f->problem_classes()) {
      const std::vector<Config> defaults = defaults_for(*f, p, limits);
      std::size_t invalid = 0;
      const auto configs = configs_to_check(*f, p, limits, o, invalid);
      s.invalid += invalid;
      s.invalid_by_family[f->name()] += invalid;
      for (const auto& c : configs) {
        std::string why;
        if (c == defaults.front() && !f->is_valid(c, p, limits, &why)) {
          // A spec's default its restrictions exclude: run and tune take the valid config nearest it, or refuse
          // the problem where the space has none; its source is not compiled.
          bool any = false;
          for (std::uint64_t i = 0; i < f->space().size() && !any; ++i) any = f->is_valid(f->space().at(i), p, limits);
          s.rows.push_back({f->name(), p, c, true, {}, fmt::format("default config not valid here ({}){}", why,
                                                                     any ? "" : "; no config of the space is")});
          s.rows.back().result.arch = o.arch;
          row_source.push_back(kNoSource);
          row_family.push_back(f);
          continue;
        }
        auto r = f->render(c, p);
        Hasher h;
        h.add(r.source);
        for (const auto& k : r.kernels) h.add(k);
        const auto [it, fresh] = source_index.emplace(h.hex(), sources.size());
        if (fresh) sources.push_back(std::move(r));
        row_source.push_back(it->second);
        s.rows.push_back({f->name(), p, c, std::find(defaults.begin(), defaults.end(), c) != defaults.end(), {}, {}});
        row_family.push_back(f);
      }
    }
  }
  s.unique_sources = sources.size();
  std::size_t cached = 0;
  const auto results = compiler.compile_many(sources, o.arch, o.threads, [&](std::size_t done, const CompileResult& r) {
    cached += r.cache_hit ? 1 : 0;
    if (o.progress) o.progress(done, sources.size(), cached);
  });
  std::map<std::string, std::vector<std::uint64_t>> addresses;  // per family and problem: the workload's count
  for (std::size_t i = 0; i < s.rows.size(); ++i) {
    auto& row = s.rows[i];
    if (row_source[i] == kNoSource) {
      ++s.not_compiled;
      ++s.failures;
      continue;
    }
    row.result = results[row_source[i]];
    if (!row.result.ok) {
      row.failure = "compile error";
      ++s.failures;
      continue;
    }
    // The one fit check, on the launches the config would make (buffer
    // addresses stand in: a plan only packs them).
    const auto& family = *row_family[i];
    auto& fake = addresses[row.family + "|" + row.problem.key()];
    if (fake.empty())  // the buffers' count, not the workload (a spec's reference kernel, emulated, at full size)
      for (std::size_t b = 0; b < family.buffer_shapes(row.problem).size(); ++b) fake.push_back((b + 1) << 32);
    std::vector<std::string> names;
    for (const auto& k : row.result.kernels) names.push_back(k.name_expression);
    const auto fit = exec::check_fit(names, row.result.kernels, family.plan(row.config, row.problem, fake, limits),
                                     limits);
    if (!fit.fits())
      row.failure = fmt::format("does not fit: {}: {}", fit.kernel, fit.verdict.reason);
    else if (row.is_default && fit.verdict.verdict == search::Verdict::kRankLast)
      row.failure = fmt::format("default config {} in {}", fit.verdict.reason, fit.kernel);
    if (!row.failure.empty()) ++s.failures;
  }
  for (const auto& r : results) s.cache_hits += r.cache_hit ? 1 : 0;
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return s;
}

}  // namespace ktune::tuner
