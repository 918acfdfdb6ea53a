// What the device backends' tests (emu and gpu) compare with: a seeded random
// batch, and the relative L2 error of a tensor against the cpu backend's.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace ktune::test {

inline void random_tokens(std::int64_t n, std::int64_t vocab, std::uint64_t seed, std::vector<std::int32_t>& tokens,
                          std::vector<std::int32_t>& targets) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int32_t> pick(0, static_cast<std::int32_t>(vocab - 1));
  tokens.resize(n);
  targets.resize(n);
  for (auto& t : tokens) t = pick(rng);
  for (auto& t : targets) t = pick(rng);
}

/// Values of `got` whose bits differ from `want`'s, or the larger size when
/// the sizes differ: what a test of bitwise equality checks, so that a
/// failure prints a count rather than two whole parameter vectors.
inline std::size_t differing(std::span<const float> got, std::span<const float> want) {
  if (got.size() != want.size()) return std::max(got.size(), want.size());
  std::size_t n = 0;
  for (std::size_t i = 0; i < got.size(); ++i) n += std::memcmp(&got[i], &want[i], sizeof(float)) != 0;
  return n;
}

/// Relative L2 error of got against want over [offset, offset + n); infinite
/// where got holds a NaN.
inline double rel_l2(std::span<const float> got, std::span<const float> want, std::int64_t offset, std::int64_t n) {
  double num = 0, den = 0;
  for (std::int64_t i = offset; i < offset + n; ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
  }
  if (std::isnan(num)) return INFINITY;
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

}  // namespace ktune::test
