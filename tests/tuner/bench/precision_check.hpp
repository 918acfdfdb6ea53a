// The check both precision benchmark tests run, on the emulation and on a
// GPU: every sum equals, to the bit, a host reference that rounds by
// frexp/ldexp (round to nearest even), independent of the backends' own
// conversions.
#pragma once
#include <catch2/catch.hpp>

#include <cmath>

#include "tuner/bench/precision_bench.hpp"

namespace ktune::test {

/// Significand bits (the implicit one included) of a dtype of the benchmark.
inline int significand_bits(const std::string& dtype) { return dtype == "f32" ? 24 : dtype == "f16" ? 11 : 8; }

/// `x` to the nearest value of `bits` significand bits, ties to even (x a
/// normal number of the dtype, as every value of these cases is).
inline double round_to_bits(double x, int bits) {
  if (x == 0) return 0;
  int exponent = 0;
  const double m = std::frexp(x, &exponent);  // x = m 2^exponent, 0.5 <= |m| < 1
  return std::ldexp(std::nearbyint(std::ldexp(m, bits)), exponent - bits);
}

/// The benchmark's sum on the host: the addend rounded once, each addition in
/// fp32, then rounded to the sum's dtype.
inline double reference_sum(const std::string& sum_dtype, const std::string& addend_dtype, std::int64_t count,
                            double value) {
  const double addend = round_to_bits(static_cast<float>(value), significand_bits(addend_dtype));
  double s = 0;
  for (std::int64_t i = 0; i < count; ++i)
    s = round_to_bits(static_cast<float>(static_cast<float>(s) + static_cast<float>(addend)),
                      significand_bits(sum_dtype));
  return s;
}

inline tuner::PrecisionReport check_precision(tuner::exec::Backend& backend, std::int64_t count, double value) {
  const auto report = tuner::run_precision_bench(backend, count, value);
  REQUIRE(report.rows.size() == tuner::precision_cases().size());
  for (const auto& r : report.rows) {
    INFO(r.sum_dtype << " += " << r.addend_dtype << ", " << count << " x " << value);
    CHECK(r.addend == round_to_bits(static_cast<float>(value), significand_bits(r.addend_dtype)));
    CHECK(r.sum == reference_sum(r.sum_dtype, r.addend_dtype, count, value));
  }
  return report;
}

/// Seed 003's sums of 1000 x 0.01, as PyTorch printed them: f32 10.0001,
/// f16 9.9531, f32 += f16 10.0021.
inline void check_seed_sums(const tuner::PrecisionReport& report) {
  REQUIRE(report.rows.size() >= 3);
  CHECK(report.rows[0].sum == Approx(10.0001).margin(5e-5));
  CHECK(report.rows[1].sum == Approx(9.9531).margin(5e-5));
  CHECK(report.rows[2].sum == Approx(10.0021).margin(5e-5));
}

}  // namespace ktune::test
