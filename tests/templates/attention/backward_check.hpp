// The attention backward run through an execution backend (emulation or
// CUDA), for backward_emu_test.cpp and its GPU twin: a fresh seeded workload
// (the family's: fp64 streaming reference), laid out (batch, seq, heads,
// head_dim) or (batch, heads, seq, head_dim), outputs and workspace poisoned
// (NaN), the plan launched through the typed face, dQ, dK and dV compared
// with the reference (relative L2; a gradient that is exactly zero, as dQ and
// dK are at seq 1, is measured against dV's norm instead).
#pragma once
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "templates/attention/attention.hpp"
#include "tuner/exec/backend.hpp"

namespace ktune::test {

struct BackwardErrors {
  double dq = 0, dk = 0, dv = 0;
  double tolerance = 0;
  /// dQ, dK and dV each pass the family's own check (its tolerance, or its atol as an RMS error).
  bool family_check = true;
  double worst() const { return std::max({dq, dk, dv}); }
};

/// Moves rows of head_dim elements between (batch, seq, heads) order and
/// (batch, heads, seq) order; to_bhsd picks the direction.
inline std::vector<std::byte> permute_rows(const std::vector<std::byte>& src, std::int64_t batch, std::int64_t seq,
                                           std::int64_t heads, std::size_t row_bytes, bool to_bhsd) {
  std::vector<std::byte> dst(src.size());
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t s = 0; s < seq; ++s)
      for (std::int64_t h = 0; h < heads; ++h) {
        const auto bshd = static_cast<std::size_t>((b * seq + s) * heads + h) * row_bytes;
        const auto bhsd = static_cast<std::size_t>((b * heads + h) * seq + s) * row_bytes;
        std::memcpy(dst.data() + (to_bhsd ? bhsd : bshd), src.data() + (to_bhsd ? bshd : bhsd), row_bytes);
      }
  return dst;
}

/// L2 norm of a buffer's values (+inf with a NaN or Inf among them).
inline double norm(templates::DType t, const std::vector<std::byte>& bytes) {
  double sum = 0;
  for (std::size_t i = 0; i < bytes.size() / templates::size_of(t); ++i) {
    const double x = templates::value_at(t, bytes, i);
    sum += x * x;
  }
  return std::isfinite(sum) ? std::sqrt(sum) : INFINITY;
}

/// Runs `config` of attention_bwd on `problem` through `backend`, from
/// `rendered` when given (a changed source: the tests that must see a
/// broken kernel fail), else the family's rendering; on `workload` when
/// given (inputs of the test's own, laid out as the family's), else the
/// family's of `seed`.
inline BackwardErrors run_backward(tuner::exec::Backend& backend, const Config& config,
                                   const templates::Problem& problem, bool bhsd, std::uint64_t seed,
                                   const templates::Rendered* rendered = nullptr,
                                   const templates::Workload* workload = nullptr) {
  namespace at = templates::attention;
  const auto& f = at::backward_family();
  INFO(problem.key() << " " << config.str() << (bhsd ? " (batch, heads, seq, head_dim)" : ""));
  std::string why;
  REQUIRE(f.is_valid(config, problem, backend.device(), &why));
  const auto w = workload ? *workload : f.make_workload(problem, seed);
  const at::AttentionShape s = at::shape_of(problem);
  const auto kv = [&] {
    at::AttentionShape k = s;
    k.heads = s.kv_heads;
    return k;
  }();
  // q, k, v, o, lse, do, dq, dk, dv, scratch; tensors with K's heads: k, v, dk, dv.
  const std::set<std::string> kv_tensors = {"k", "v", "dk", "dv"};
  auto heads_of = [&](const std::string& name) { return kv_tensors.count(name) ? s.kv_heads : s.heads; };
  std::vector<std::unique_ptr<tuner::exec::Buffer>> buffers;
  for (const auto& b : w.buffers) {
    const bool tensor = b.name != "lse" && b.name != "scratch";
    const std::size_t bytes = b.name == "scratch" ? std::max<std::size_t>(16, f.workspace_bytes(config, problem))
                                                  : b.bytes.size();
    buffers.push_back(backend.allocate(bytes, b.name));
    if (b.role == templates::Role::kInput) {
      const auto data = tensor && bhsd ? permute_rows(b.bytes, s.batch, s.seq, heads_of(b.name),
                                                      b.bytes.size() / static_cast<std::size_t>(
                                                                           s.batch * s.seq * heads_of(b.name)),
                                                      true)
                                       : b.bytes;
      backend.upload(*buffers.back(), data.data(), data.size());
    } else {
      backend.poison(*buffers.back());
    }
  }
  auto address = [&](std::size_t i) { return buffers[i]->address(); };
  const auto st = bhsd ? at::bhsd_strides(s) : at::bshd_strides(s);
  const auto kv_st = bhsd ? at::bhsd_strides(kv) : at::bshd_strides(kv);
  at::BackwardArgs a{.q = address(0), .k = address(1), .v = address(2), .o = address(3), .lse = address(4),
                     .dout = address(5), .dq = address(6), .dk = address(7), .dv = address(8),
                     .workspace = address(9), .q_strides = st, .k_strides = kv_st, .v_strides = kv_st,
                     .o_strides = st, .do_strides = st, .dq_strides = st, .dk_strides = kv_st, .dv_strides = kv_st,
                     .scale = at::default_scale(s.head_dim)};
  const auto module = backend.load(rendered ? *rendered : f.render(config, problem));
  backend.launch(*module, f.plan(config, problem, a, backend.device()));
  backend.synchronize();
  BackwardErrors e;
  for (std::size_t i = 6; i < 9; ++i) {
    const auto& b = w.buffers[i];
    std::vector<std::byte> got(b.bytes.size());
    backend.download(got.data(), *buffers[i], got.size());
    if (bhsd)
      got = permute_rows(got, s.batch, s.seq, heads_of(b.name),
                         got.size() / static_cast<std::size_t>(s.batch * s.seq * heads_of(b.name)), false);
    double err = templates::relative_l2(b.dtype, got, b.expected);
    e.family_check = e.family_check && templates::within_tolerance(b, got, err);
    if (norm(b.dtype, b.expected) == 0)  // exactly zero (seq 1: one key, dS = 0): measured against dV's scale
      err = norm(b.dtype, got) / norm(w.buffers[8].dtype, w.buffers[8].expected);
    (i == 6 ? e.dq : i == 7 ? e.dk : e.dv) = err;
    e.tolerance = b.tolerance;
  }
  return e;
}

/// run_backward, and each of dQ, dK, dV within the family's tolerance.
inline BackwardErrors check_backward(tuner::exec::Backend& backend, const Config& config,
                                     const templates::Problem& problem, bool bhsd = false, std::uint64_t seed = 3) {
  const BackwardErrors e = run_backward(backend, config, problem, bhsd, seed);
  INFO(problem.key() << " " << config.str() << (bhsd ? " bhsd" : "") << ": dq " << e.dq << " dk " << e.dk << " dv "
                     << e.dv << " tolerance " << e.tolerance);
  CHECK(e.dq <= e.tolerance);
  CHECK(e.dk <= e.tolerance);
  CHECK(e.dv <= e.tolerance);
  return e;
}

}  // namespace ktune::test
