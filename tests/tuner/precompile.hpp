// Compiles the variants a gpu test is about to run, on every core, into the
// binary cache: the checks that follow load them from it. A test that
// checks hundreds of attention variants (0.5-4 s of NVRTC each) would
// otherwise compile them one at a time as it runs them, minutes of a GPU
// lease spent on one core.
#pragma once
#include <string>
#include <vector>

#include "templates/family.hpp"
#include "tuner/compile/compiler.hpp"

namespace ktune::test {

/// One variant: a family's config on a problem.
struct Variant {
  const templates::Family* family = nullptr;
  Config config;
  templates::Problem problem;
};

/// Compiles every variant for `arch` on all cores (KTUNE_COMPILE_THREADS);
/// failures are left for the checks to report.
inline void precompile(const std::vector<Variant>& variants, const std::string& arch) {
  std::vector<templates::Rendered> sources;
  sources.reserve(variants.size());
  for (const auto& v : variants) sources.push_back(v.family->render(v.config, v.problem));
  tuner::Compiler().compile_many(sources, arch);
}

}  // namespace ktune::test
