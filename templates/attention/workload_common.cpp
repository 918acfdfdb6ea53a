// Host helpers both attention families share (see workload_common.hpp).
#include "templates/attention/workload_common.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "base/error.hpp"
#include "templates/attention/attention.hpp"
#include "templates/render.hpp"

namespace ktune::templates::attention {

double stored(const Problem& p, double value) {
  const auto f = static_cast<float>(value);
  if (p.dtype == "bf16") return bf16_bits_to_float(float_to_bf16_bits(f));
  if (p.dtype == "f16") return f16_bits_to_float(float_to_f16_bits(f));
  return f;
}

std::vector<double> draw_stored(const Problem& p, std::mt19937_64& rng, std::size_t count, float lo, float hi) {
  const auto values = random_floats(rng, count, lo, hi);
  std::vector<double> x(count);
  for (std::size_t i = 0; i < count; ++i) x[i] = stored(p, values[i]);
  return x;
}

HostBuffer element_buffer(std::string name, Role role, const Problem& p, const std::vector<double>& values) {
  if (is_tf32(p))
    return make_buffer(std::move(name), role, DType::kF32, std::vector<float>(values.begin(), values.end()));
  std::vector<std::uint16_t> bits(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    const auto f = static_cast<float>(values[i]);
    bits[i] = p.dtype == "bf16" ? float_to_bf16_bits(f) : float_to_f16_bits(f);
  }
  return make_buffer(std::move(name), role, element_dtype(p), bits);
}

std::int64_t copy_registers(std::int64_t rows, const Problem& p, bool swizzled, std::int64_t threads) {
  const std::int64_t chunks = p.dim("head_dim") * element_bytes(p) / 16;  // 16-byte chunks of a row
  const std::int64_t swizzle = !swizzled         ? 1
                               : chunks % 8 == 0 ? 8
                               : chunks % 4 == 0 ? 4
                               : chunks % 2 == 0 ? 2
                                                 : 1;
  const std::int64_t step = threads / chunks;  // rows between a thread's copies
  if (threads % chunks == 0 && step % swizzle == 0 && rows % step == 0) return 0;
  return 3 * (rows * chunks / threads) / 2;
}

void require_aligned(const std::string& family, const char* buffer, std::uint64_t address, std::uint64_t align) {
  KTUNE_REQUIRE(address % align == 0, fmt::format("{}: buffer '{}' at {:#x} is not aligned to {} bytes", family,
                                                  buffer, address, align));
}

void require_strides(const std::string& family, const char* buffer, const TensorStrides& s,
                     std::int64_t element_bytes) {
  const std::int64_t chunk = 16 / element_bytes;
  for (const std::int64_t v : {s.batch, s.head, s.seq})
    KTUNE_REQUIRE(v >= 0 && v % chunk == 0,
                  fmt::format("{}: strides of '{}' (batch {}, head {}, seq {}) must be non-negative "
                              "multiples of {} elements: rows are copied in 16-byte chunks",
                              family, buffer, s.batch, s.head, s.seq, chunk));
}

double score_spread(const Problem& p, const std::vector<double>& q, const std::vector<double>& k, double scale) {
  return scale * std::sqrt(static_cast<double>(p.dim("head_dim"))) * std::sqrt(mean_square(q)) *
         std::sqrt(mean_square(k));
}

double score_error_growth(const Problem& p, double scale) {
  if (!is_tf32(p)) return 1.0;
  return std::max(1.0, scale / static_cast<double>(default_scale(p.dim("head_dim"))));
}

std::vector<double> softmax_square_sums(const AttentionShape& s, const std::vector<std::uint8_t>& checked,
                                        const std::vector<double>& q, const std::vector<double>& k,
                                        const std::vector<double>& lse, double scale) {
  const std::int64_t D = s.head_dim, S = s.seq, group = s.heads / s.kv_heads;
  const TensorStrides st = bshd_strides(s);
  AttentionShape kv = s;
  kv.heads = s.kv_heads;
  const TensorStrides kv_st = bshd_strides(kv);
  std::vector<double> sums(checked.size(), 0.0);
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t h = 0; h < s.heads; ++h)
      for (std::int64_t i = 0; i < S; ++i) {
        const auto row = static_cast<std::size_t>((b * s.heads + h) * S + i);
        if (!checked[row]) continue;
        const double* qi = q.data() + b * st.batch + h * st.head + i * st.seq;
        const double* kh = k.data() + b * kv_st.batch + h / group * kv_st.head;
        for (std::int64_t j = 0; j < (s.causal ? i + 1 : S); ++j) {
          double dot = 0;
          for (std::int64_t d = 0; d < D; ++d) dot += qi[d] * kh[j * kv_st.seq + d];
          const double pij = std::exp(scale * dot - lse[row]);
          sums[row] += pij * pij;
        }
      }
  return sums;
}

std::vector<std::uint8_t> sample_rows(const AttentionShape& s, std::uint64_t seed, double cost_per_key) {
  const std::int64_t pairs = s.batch * s.heads, S = s.seq;
  const auto rows = static_cast<std::size_t>(pairs * S);
  const auto seen = [&](std::int64_t i) { return static_cast<double>(s.causal ? i + 1 : S); };
  const double per_row = cost_per_key * static_cast<double>(s.head_dim);
  const double keys_per_head = s.causal ? 0.5 * static_cast<double>(S) * static_cast<double>(S + 1)
                                        : static_cast<double>(S) * static_cast<double>(S);
  if (static_cast<double>(pairs) * keys_per_head * per_row <= kReferenceBudget)
    return std::vector<std::uint8_t>(rows, 1);
  std::vector<std::uint8_t> checked(rows, 0);
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
  std::uniform_int_distribution<std::int64_t> pick_pair(0, pairs - 1), pick_row(0, S - 1);
  std::vector<std::int64_t> chosen = {pick_pair(rng)};
  if (pairs > 1) {
    std::int64_t other = pick_pair(rng);
    while (other == chosen[0]) other = pick_pair(rng);
    chosen.push_back(other);
  }
  double spent = 0;
  for (const std::int64_t bh : chosen) {  // the last row of each: every key
    checked[static_cast<std::size_t>(bh * S + S - 1)] = 1;
    spent += seen(S - 1) * per_row;
  }
  // Rows at random until the budget is spent (a bounded number of draws).
  for (int tries = 0; tries < 1 << 20 && spent < kReferenceBudget; ++tries) {
    const std::int64_t bh = chosen[static_cast<std::size_t>(tries) % chosen.size()], i = pick_row(rng);
    auto& c = checked[static_cast<std::size_t>(bh * S + i)];
    if (!c) {
      c = 1;
      spent += seen(i) * per_row;
    }
  }
  return checked;
}

void fill_unchecked(const AttentionShape& s, const std::vector<std::uint8_t>& checked, const std::vector<double>& v,
                    std::vector<double>& o, std::vector<double>& lse) {
  const std::int64_t D = s.head_dim, S = s.seq, group = s.heads / s.kv_heads;
  const TensorStrides st = bshd_strides(s);
  AttentionShape kv = s;
  kv.heads = s.kv_heads;
  const TensorStrides kv_st = bshd_strides(kv);
  std::vector<double> prefix(static_cast<std::size_t>(D)), total(static_cast<std::size_t>(D));
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t h = 0; h < s.heads; ++h) {
      const std::int64_t bh = b * s.heads + h;
      std::fill(prefix.begin(), prefix.end(), 0.0);
      std::fill(total.begin(), total.end(), 0.0);
      const double* vh = v.data() + b * kv_st.batch + h / group * kv_st.head;
      if (!s.causal)
        for (std::int64_t j = 0; j < S; ++j)
          for (std::int64_t d = 0; d < D; ++d) total[static_cast<std::size_t>(d)] += vh[j * kv_st.seq + d];
      for (std::int64_t i = 0; i < S; ++i) {
        for (std::int64_t d = 0; d < D; ++d) prefix[static_cast<std::size_t>(d)] += vh[i * kv_st.seq + d];
        if (checked[static_cast<std::size_t>(bh * S + i)]) continue;
        const double n = s.causal ? static_cast<double>(i + 1) : static_cast<double>(S);
        const auto& sum = s.causal ? prefix : total;
        double* oi = o.data() + b * st.batch + h * st.head + i * st.seq;
        for (std::int64_t d = 0; d < D; ++d) oi[d] = sum[static_cast<std::size_t>(d)] / n;
        lse[static_cast<std::size_t>(bh * S + i)] = std::log(n);
      }
    }
}

bool is_sample(const std::vector<std::uint8_t>& checked) {
  return std::find(checked.begin(), checked.end(), std::uint8_t{0}) != checked.end();
}

std::vector<std::uint8_t> checked_elements(const AttentionShape& s, const std::vector<std::uint8_t>& checked) {
  const TensorStrides st = bshd_strides(s);
  std::vector<std::uint8_t> flags(static_cast<std::size_t>(s.batch * s.seq * s.heads * s.head_dim), 0);
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t h = 0; h < s.heads; ++h)
      for (std::int64_t i = 0; i < s.seq; ++i)
        if (checked[static_cast<std::size_t>((b * s.heads + h) * s.seq + i)])
          std::fill_n(flags.begin() + b * st.batch + h * st.head + i * st.seq, s.head_dim, std::uint8_t{1});
  return flags;
}

void zero_unchecked(const AttentionShape& s, const std::vector<std::uint8_t>& checked,
                    std::vector<std::vector<double>*> tensors) {
  const TensorStrides st = bshd_strides(s);
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t h = 0; h < s.heads; ++h)
      for (std::int64_t i = 0; i < s.seq; ++i) {
        if (checked[static_cast<std::size_t>((b * s.heads + h) * s.seq + i)]) continue;
        for (auto* t : tensors)
          std::fill_n(t->data() + b * st.batch + h * st.head + i * st.seq, s.head_dim, 0.0);
      }
}

std::string wgmma_unsupported(const Problem& p, const DeviceLimits& d) {
  if (d.arch != "sm_90" && d.arch != "sm_90a")
    return "wgmma needs an sm_90 device, whose arch-specific target sm_90a has wgmma; this is " + d.arch;
  if (element_bytes(p) != 2) return "wgmma takes 16-bit inputs (bf16, f16)";
  if (p.dim("head_dim") != 64 && p.dim("head_dim") != 128)
    return "wgmma takes head dims 64 and 128 (whole 128-byte rows)";
  return "";
}

std::string wgmma_over_registers(std::int64_t registers, std::int64_t warps, const DeviceLimits& d,
                                 const char* what) {
  const std::int64_t budget = std::min<std::int64_t>(d.max_regs_per_thread, d.regs_per_sm / (32 * warps));
  if (registers <= budget) return "";
  return fmt::format("wgmma: each thread would need about {} registers ({}), over the {} a block of {} "
                     "threads allows",
                     registers, what, budget, 32 * warps);
}

}  // namespace ktune::templates::attention
