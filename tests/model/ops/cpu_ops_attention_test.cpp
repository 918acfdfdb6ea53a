// The cpu backend's attention (CpuOps: GEMMs over blocks of query rows on
// OpenBLAS, a thread per range of heads) against the materialising fp64
// reference (templates/attention/reference.hpp), forward and backward, on
// fresh random data and outputs poisoned first: sequences shorter than a
// row block, a whole one, and ragged ones of several, causal and not, fp32
// and fp64, on one thread and two.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "gradcheck.hpp"
#include "model/memory_plan.hpp"
#include "model/ops/cpu_ops.hpp"
#include "model/parallel.hpp"
#include "templates/attention/reference.hpp"

namespace model_ops_cpu_ops_attention_test {

using namespace ktune;
using namespace ktune::model;
using templates::attention::AttentionShape;

namespace {

struct Result {
  std::vector<double> probs, out, dq, dk, dv;
};

std::vector<double> widen(const std::vector<float>& x) { return {x.begin(), x.end()}; }
std::vector<double> widen(const std::vector<double>& x) { return x; }

// The tensors (batch, seq, heads, head_dim) and probabilities (batch, heads,
// seq, seq) of one problem, laid out in one region as the model lays its
// buffers, through CpuOps<T> on `threads` threads.
template <class T>
Result cpu_ops_attention(const AttentionShape& s, const std::vector<double>& q, const std::vector<double>& k,
                         const std::vector<double>& v, const std::vector<double>& dout, unsigned threads) {
  const std::int64_t n = s.batch * s.seq * s.heads * s.head_dim, p = s.batch * s.heads * s.seq * s.seq;
  enum : std::int64_t { kQ, kK, kV, kOut, kDout, kDq, kDk, kDv, kProbs };
  std::vector<T> acts(static_cast<std::size_t>(8 * n + p), std::numeric_limits<T>::quiet_NaN());
  const auto at = [&](std::int64_t i) { return acts.begin() + i * n; };
  std::copy(q.begin(), q.end(), at(kQ));
  std::copy(k.begin(), k.end(), at(kK));
  std::copy(v.begin(), v.end(), at(kV));
  std::copy(dout.begin(), dout.end(), at(kDout));
  WorkspaceLayout work;
  work.attn_scratch = 0;
  std::vector<T> scratch(static_cast<std::size_t>(threads * attention_scratch_elements(s)),
                         std::numeric_limits<T>::quiet_NaN());
  std::array<void*, kRegionCount> bases{};
  bases[static_cast<int>(Region::kLayers)] = acts.data();
  bases[static_cast<int>(Region::kWork)] = scratch.data();
  Parallel parallel(threads);
  CpuOps<T> ops(bases, work, parallel);
  const auto ref = [&](std::int64_t i) { return Ref{Region::kLayers, i * n}; };
  ops.attention_forward(ref(kQ), ref(kK), ref(kV), ref(kProbs), ref(kOut), s, s.heads * s.head_dim);
  ops.attention_backward(ref(kQ), ref(kK), ref(kV), ref(kOut), ref(kProbs), ref(kDout), ref(kDq), ref(kDk),
                         ref(kDv), s, s.heads * s.head_dim);
  const auto part = [&](std::int64_t i, std::int64_t count) {
    return widen(std::vector<T>(at(i), at(i) + count));
  };
  return {part(kProbs, p), part(kOut, n), part(kDq, n), part(kDk, n), part(kDv, n)};
}

Result reference_attention(const AttentionShape& s, const std::vector<double>& q, const std::vector<double>& k,
                           const std::vector<double>& v, const std::vector<double>& dout) {
  const std::size_t n = q.size();
  Result r{std::vector<double>(static_cast<std::size_t>(s.batch * s.heads * s.seq * s.seq)),
           std::vector<double>(n), std::vector<double>(n), std::vector<double>(n), std::vector<double>(n)};
  std::vector<double> scratch(static_cast<std::size_t>(templates::attention::scratch_elements(s)));
  const std::int64_t pairs = s.batch * s.heads;
  templates::attention::attention_forward(q.data(), k.data(), v.data(), r.probs.data(), r.out.data(),
                                          scratch.data(), s, 0, pairs);
  templates::attention::attention_backward(q.data(), k.data(), v.data(), r.probs.data(), dout.data(), r.dq.data(),
                                           r.dk.data(), r.dv.data(), scratch.data(), s, 0, pairs);
  return r;
}

template <class T>
void check_matches_reference(const AttentionShape& s, unsigned threads, double tolerance) {
  INFO("batch " << s.batch << ", seq " << s.seq << ", heads " << s.heads << ", head_dim " << s.head_dim
                << (s.causal ? ", causal" : "") << ", " << threads << " threads, " << sizeof(T) * 8 << "-bit");
  const auto n = static_cast<std::size_t>(s.batch * s.seq * s.heads * s.head_dim);
  // Scores up to ~10: rows whose max moves, and probabilities far from uniform.
  const auto q = test::random_values(n, 81, -2, 2), k = test::random_values(n, 82, -2, 2);
  const auto v = test::random_values(n, 83), dout = test::random_values(n, 84);
  const Result got = cpu_ops_attention<T>(s, q, k, v, dout, threads);
  const Result want = reference_attention(s, q, k, v, dout);
  // Every output written (max_rel_error passes a NaN by).
  for (const auto* t : {&got.probs, &got.out, &got.dq, &got.dk, &got.dv})
    CHECK(std::all_of(t->begin(), t->end(), [](double x) { return std::isfinite(x); }));
  CHECK(test::max_rel_error(got.probs, want.probs) < tolerance);
  CHECK(test::max_rel_error(got.out, want.out) < tolerance);
  CHECK(test::max_rel_error(got.dq, want.dq) < tolerance);
  CHECK(test::max_rel_error(got.dk, want.dk) < tolerance);
  CHECK(test::max_rel_error(got.dv, want.dv) < tolerance);
}

}  // namespace

TEST_CASE("cpu backend attention: forward and backward match the fp64 reference, causal and not, ragged row blocks",
          "[model][attention]") {
  const std::int64_t block = kAttentionRowBlock;
  for (const bool causal : {true, false}) {
    for (const AttentionShape& s : {AttentionShape{1, 1, 1, 4, causal}, AttentionShape{2, 13, 3, 8, causal},
                                    AttentionShape{1, block, 2, 16, causal},
                                    AttentionShape{2, 2 * block + 23, 3, 16, causal}}) {
      check_matches_reference<double>(s, 2, 1e-11);
      check_matches_reference<float>(s, 2, 2e-4);
    }
  }
  check_matches_reference<float>(AttentionShape{3, block + 1, 2, 8, true}, 1, 2e-4);
}

}  // namespace model_ops_cpu_ops_attention_test
