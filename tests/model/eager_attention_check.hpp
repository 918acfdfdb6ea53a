// The check both eager attention tests run, on the emulation and on a GPU.
#pragma once
#include <catch2/catch.hpp>

#include <string>

#include "model/attention_bench.hpp"

namespace ktune::test {

inline templates::Problem attention_problem(const std::string& dtype, std::int64_t batch, std::int64_t heads,
                                            std::int64_t seq, std::int64_t head_dim, bool causal) {
  return {dtype, {{"batch", batch}, {"heads", heads}, {"seq", seq}, {"head_dim", head_dim}, {"causal", causal}}};
}

/// Eager attention on `backend` for `p`: every check within the dtype's
/// tolerance, both passes and the forward's softmax timed, its GEMMs run by an engine whose name holds `gemms`.
inline model::EagerAttentionResult check_eager_attention(tuner::exec::Backend& backend, const templates::Problem& p,
                                                         const tuner::RunOptions& options, const std::string& gemms) {
  INFO(p.key());
  const auto r = model::bench_eager_attention(backend, p, options);
  const double tolerance = p.dtype == "f32" ? 1e-5 : 1e-2;
  CHECK(r.o_error <= tolerance);
  CHECK(r.dq_error <= tolerance);
  CHECK(r.dk_error <= tolerance);
  CHECK(r.dv_error <= tolerance);
  CHECK(r.forward.median_ms > 0);
  CHECK(r.backward.median_ms > 0);
  CHECK(r.softmax.median_ms > 0);
  CHECK(r.gemms.find(gemms) != std::string::npos);
  return r;
}

}  // namespace ktune::test
