#include "templates/attention/reference.hpp"

#include <catch2/catch.hpp>
#include <cmath>

#include "gradcheck.hpp"

namespace templates_attention_reference_test {

using namespace ktune::templates::attention;
using ktune::test::max_rel_error;
using ktune::test::numeric_gradient;
using ktune::test::random_values;
using ktune::test::weighted_sum;

namespace {

// Direct formula, one (b, h, i) at a time: O_i = sum_j softmax_j(q_i.k_j / sqrt(d)) v_j.
std::vector<double> naive_attention(const std::vector<double>& q, const std::vector<double>& k,
                                    const std::vector<double>& v, const AttentionShape& s) {
  std::vector<double> out(q.size());
  auto at = [&](std::int64_t b, std::int64_t t, std::int64_t h) {
    return ((b * s.seq + t) * s.heads + h) * s.head_dim;
  };
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t h = 0; h < s.heads; ++h)
      for (std::int64_t i = 0; i < s.seq; ++i) {
        const std::int64_t n = s.causal ? i + 1 : s.seq;
        std::vector<double> w(n);
        double sum = 0;
        for (std::int64_t j = 0; j < n; ++j) {
          double dot = 0;
          for (std::int64_t d = 0; d < s.head_dim; ++d) dot += q[at(b, i, h) + d] * k[at(b, j, h) + d];
          w[j] = std::exp(dot / std::sqrt(double(s.head_dim)));
          sum += w[j];
        }
        for (std::int64_t d = 0; d < s.head_dim; ++d) {
          double o = 0;
          for (std::int64_t j = 0; j < n; ++j) o += w[j] / sum * v[at(b, j, h) + d];
          out[at(b, i, h) + d] = o;
        }
      }
  return out;
}

}  // namespace

TEST_CASE("attention forward matches the direct formula and backward matches finite differences (fp64)",
          "[attention][gradcheck]") {
  for (const bool causal : {true, false}) {
    SECTION(causal ? "causal" : "full") {
      const AttentionShape s{2, 5, 3, 4, causal};
      const std::size_t n = s.batch * s.seq * s.heads * s.head_dim;
      auto q = random_values(n, 61), k = random_values(n, 62), v = random_values(n, 63);
      const auto r = random_values(n, 64);
      std::vector<double> probs(s.batch * s.heads * s.seq * s.seq), out(n), scratch(scratch_elements(s));
      auto loss = [&] {
        attention_forward(q.data(), k.data(), v.data(), probs.data(), out.data(), scratch.data(), s, 0, 2);
        attention_forward(q.data(), k.data(), v.data(), probs.data(), out.data(), scratch.data(), s, 2,
                          s.batch * s.heads);
        return weighted_sum(out, r);
      };
      loss();
      CHECK(max_rel_error(out, naive_attention(q, k, v, s)) < 1e-12);
      if (causal) CHECK(probs[1] == 0.0);  // (b 0, h 0, i 0, j 1) is masked
      std::vector<double> dq(n), dk(n), dv(n);
      attention_backward(q.data(), k.data(), v.data(), probs.data(), r.data(), dq.data(), dk.data(), dv.data(),
                         scratch.data(), s, 0, s.batch * s.heads);
      CHECK(max_rel_error(dq, numeric_gradient(q, loss)) < 1e-7);
      CHECK(max_rel_error(dk, numeric_gradient(k, loss)) < 1e-7);
      CHECK(max_rel_error(dv, numeric_gradient(v, loss)) < 1e-7);
    }
  }
}

namespace {

/// `x` (batch, seq, heads, head_dim) copied to (batch, heads, seq, head_dim).
std::vector<double> to_bhsd(const std::vector<double>& x, const AttentionShape& s) {
  std::vector<double> y(x.size());
  const TensorStrides from = bshd_strides(s), to = bhsd_strides(s);
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t h = 0; h < s.heads; ++h)
      for (std::int64_t i = 0; i < s.seq; ++i)
        for (std::int64_t d = 0; d < s.head_dim; ++d)
          y[b * to.batch + h * to.head + i * to.seq + d] = x[b * from.batch + h * from.head + i * from.seq + d];
  return y;
}

/// log(sum_j exp(scale * q_i.k_j)) by the direct formula, (batch, heads, seq).
std::vector<double> naive_lse(const std::vector<double>& q, const std::vector<double>& k, const AttentionShape& s,
                              double scale) {
  std::vector<double> lse(s.batch * s.heads * s.seq);
  const TensorStrides st = bshd_strides(s);
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t h = 0; h < s.heads; ++h)
      for (std::int64_t i = 0; i < s.seq; ++i) {
        double sum = 0;
        for (std::int64_t j = 0; j < (s.causal ? i + 1 : s.seq); ++j) {
          double dot = 0;
          for (std::int64_t d = 0; d < s.head_dim; ++d)
            dot += q[b * st.batch + h * st.head + i * st.seq + d] * k[b * st.batch + h * st.head + j * st.seq + d];
          sum += std::exp(scale * dot);
        }
        lse[(b * s.heads + h) * s.seq + i] = std::log(sum);
      }
  return lse;
}

}  // namespace

TEST_CASE("streaming attention forward matches the materialising one, in both layouts, with its lse",
          "[attention]") {
  for (const bool causal : {true, false}) {
    SECTION(causal ? "causal" : "full") {
      // Scores up to ~10: a max that moves along each row exercises the rescaling.
      const AttentionShape s{2, 23, 3, 8, causal};
      const std::size_t n = s.batch * s.seq * s.heads * s.head_dim;
      const auto q = random_values(n, 71, -3, 3), k = random_values(n, 72, -3, 3), v = random_values(n, 73);
      std::vector<double> probs(s.batch * s.heads * s.seq * s.seq), expected(n), scratch(scratch_elements(s));
      attention_forward(q.data(), k.data(), v.data(), probs.data(), expected.data(), scratch.data(), s, 0,
                        s.batch * s.heads);
      const double scale = 1 / std::sqrt(double(s.head_dim));
      const auto expected_lse = naive_lse(q, k, s, scale);
      const std::size_t rows = s.batch * s.heads * s.seq;

      std::vector<double> out(n, NAN), lse(rows, NAN);
      const TensorStrides bshd = bshd_strides(s);
      // Two calls over the (batch, head) pairs: each writes only its own.
      attention_forward_streaming(q.data(), k.data(), v.data(), out.data(), lse.data(), s, bshd, bshd, bshd, bshd,
                                  scale, 0, 4);
      attention_forward_streaming(q.data(), k.data(), v.data(), out.data(), lse.data(), s, bshd, bshd, bshd, bshd,
                                  scale, 4, s.batch * s.heads);
      CHECK(max_rel_error(out, expected) < 1e-12);
      CHECK(max_rel_error(lse, expected_lse) < 1e-12);

      // (batch, heads, seq, head_dim) inputs, output in the other layout.
      const TensorStrides bhsd = bhsd_strides(s);
      std::vector<double> out2(n, NAN), lse2(rows, NAN);
      const auto qt = to_bhsd(q, s), kt = to_bhsd(k, s), vt = to_bhsd(v, s);
      attention_forward_streaming(qt.data(), kt.data(), vt.data(), out2.data(), lse2.data(), s, bhsd, bhsd, bhsd,
                                  bshd, scale, 0, s.batch * s.heads);
      CHECK(max_rel_error(out2, expected) < 1e-12);
      CHECK(max_rel_error(lse2, expected_lse) < 1e-12);

      // Another scale is the default scale applied to q * (scale * sqrt(d)).
      const double other = 0.7;
      auto q_scaled = q;
      for (auto& x : q_scaled) x *= other * std::sqrt(double(s.head_dim));
      attention_forward(q_scaled.data(), k.data(), v.data(), probs.data(), expected.data(), scratch.data(), s, 0,
                        s.batch * s.heads);
      attention_forward_streaming(q.data(), k.data(), v.data(), out.data(), lse.data(), s, bshd, bshd, bshd, bshd,
                                  other, 0, s.batch * s.heads);
      CHECK(max_rel_error(out, expected) < 1e-12);
      CHECK(max_rel_error(lse, naive_lse(q, k, s, other)) < 1e-12);
    }
  }
  SECTION("float, one key per row when causal, and a row of one") {
    const AttentionShape s{1, 1, 1, 4, true};
    const std::vector<float> q = {1, 2, 3, 4}, k = {0.5f, -1, 2, 0}, v = {4, 3, 2, 1};
    std::vector<float> out(4, NAN), lse(1, NAN);
    const TensorStrides st = bshd_strides(s);
    attention_forward_streaming(q.data(), k.data(), v.data(), out.data(), lse.data(), s, st, st, st, st, 0.5f, 0, 1);
    CHECK(out == v);
    CHECK(lse[0] == Approx(0.5f * (0.5f - 2 + 6)));
  }
}

TEST_CASE("streaming attention forward with grouped-query heads reads K/V head h / (heads / kv_heads)",
          "[attention]") {
  // 6 query heads over 2 K/V heads equals 6 heads whose K/V heads 0-2 and 3-5 are copies.
  AttentionShape s{2, 11, 6, 8, true};
  s.kv_heads = 2;
  AttentionShape kv_shape = s;
  kv_shape.heads = 2;
  AttentionShape full = s;
  full.kv_heads = 6;
  const std::size_t n = s.batch * s.seq * s.heads * s.head_dim, kv_n = n / 3;
  const auto q = random_values(n, 81, -2, 2), k = random_values(kv_n, 82, -2, 2), v = random_values(kv_n, 83);
  std::vector<double> k_full(n), v_full(n);
  const TensorStrides qs = bshd_strides(s), ks = bshd_strides(kv_shape);
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t h = 0; h < s.heads; ++h)
      for (std::int64_t i = 0; i < s.seq; ++i)
        for (std::int64_t d = 0; d < s.head_dim; ++d) {
          k_full[b * qs.batch + h * qs.head + i * qs.seq + d] = k[b * ks.batch + h / 3 * ks.head + i * ks.seq + d];
          v_full[b * qs.batch + h * qs.head + i * qs.seq + d] = v[b * ks.batch + h / 3 * ks.head + i * ks.seq + d];
        }
  const std::size_t rows = s.batch * s.heads * s.seq;
  std::vector<double> out(n, NAN), lse(rows, NAN), expected(n), expected_lse(rows);
  attention_forward_streaming(q.data(), k.data(), v.data(), out.data(), lse.data(), s, qs, ks, ks, qs, 0.3, 0,
                              s.batch * s.heads);
  attention_forward_streaming(q.data(), k_full.data(), v_full.data(), expected.data(), expected_lse.data(), full, qs,
                              qs, qs, qs, 0.3, 0, s.batch * s.heads);
  CHECK(out == expected);
  CHECK(lse == expected_lse);
}

}  // namespace templates_attention_reference_test
