#include "templates/attention/reference.hpp"

#include <catch2/catch.hpp>
#include <cmath>

#include "gradcheck.hpp"

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
  auto at = [&](std::int64_t b, std::int64_t t, std::int64_t h) { return ((b * s.seq + t) * s.heads + h) * s.head_dim; };
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
