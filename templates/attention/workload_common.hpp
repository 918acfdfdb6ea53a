// Host helpers both attention families share: the problem's element type,
// buffers of it, checks of the addresses and strides a plan receives, and
// the row sample that lets a workload at benchmark size (seq 16k) be checked
// against the fp64 reference in seconds.
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "templates/attention/reference.hpp"
#include "templates/common/family_helpers.hpp"
#include "templates/problem.hpp"
#include "templates/workload.hpp"

namespace ktune::templates::attention {

/// f32 problems run on the tf32 matrix units; bf16 and f16 on the 16-bit ones.
inline bool is_tf32(const Problem& p) { return p.dtype == "f32"; }
inline std::int64_t element_bytes(const Problem& p) { return is_tf32(p) ? 4 : 2; }
/// The element type as the templates name it.
inline const char* element_type(const Problem& p) {
  return p.dtype == "bf16" ? "__nv_bfloat16" : p.dtype == "f16" ? "__half" : "float";
}
inline DType element_dtype(const Problem& p) {
  return p.dtype == "bf16" ? DType::kBF16 : p.dtype == "f16" ? DType::kF16 : DType::kF32;
}
/// The dtype whose tolerance a result of the matrix units is checked with.
inline std::string compute_dtype(const Problem& p) { return is_tf32(p) ? "tf32" : p.dtype; }

/// Blocks of 128 rows (query rows in the forward, keys in the backward)
/// that keep a large GPU busy: two per SM of an H100's 132. The defaults
/// take their long-sequence shapes from this many blocks on.
inline constexpr std::int64_t kBusyGrid = 264;
/// Blocks of 128 rows of a sequence over every head and batch.
inline std::int64_t blocks_of_128(const Problem& p) {
  return ceil_div(p.dim("seq"), 128) * p.dim("heads") * p.dim("batch");
}

/// Registers ptxas holds for the 16-byte copies of a tile of `rows` rows of
/// the problem's head_dim elements, started by `threads` threads (the
/// templates' load_tile, attention_common.cuh): none when the threads cover
/// whole rows a whole number of swizzle periods apart (`swizzled`: 1, 2, 4
/// or 8 chunks, the largest dividing a row's) and the tile is whole steps
/// of them, as each thread walks one pointer; else about 3/2 per copy, an
/// address computed once and held.
std::int64_t copy_registers(std::int64_t rows, const Problem& p, bool swizzled, std::int64_t threads);

/// Problems of every supported class (dtype, head dim, causal, grouped
/// heads), small, with sequence lengths a multiple of no tile.
std::vector<Problem> attention_problem_classes();
/// Checks an attention problem; throws kInvalidInput naming `family` and what is accepted.
void check_attention_problem(const std::string& family, const Problem& p);

/// Why the attention kernels on wgmma (the families' `mma` 1, and 2 of the
/// forward) cannot run problem `p` on device `d`, or "": an sm_90 device
/// (its arch-specific target sm_90a has wgmma), 16-bit inputs, head dims 64
/// and 128.
std::string wgmma_unsupported(const Problem& p, const DeviceLimits& d);
/// Why a wgmma kernel of `warps` warps whose threads need about `registers`
/// (for `what`) would spill on `d`, or "".
std::string wgmma_over_registers(std::int64_t registers, std::int64_t warps, const DeviceLimits& d,
                                 const char* what);

/// `value` as an element of the problem's dtype holds it.
double stored(const Problem& p, double value);
/// `count` values uniform in [lo, hi), as elements of the problem's dtype hold them.
std::vector<double> draw_stored(const Problem& p, std::mt19937_64& rng, std::size_t count, float lo, float hi);
/// A buffer of the problem's element type holding `values`, rounded to it.
HostBuffer element_buffer(std::string name, Role role, const Problem& p, const std::vector<double>& values);

/// Throws kInvalidInput unless `address` is a multiple of `align` bytes.
void require_aligned(const std::string& family, const char* buffer, std::uint64_t address, std::uint64_t align);
/// Throws kInvalidInput unless the strides are non-negative multiples of 16 bytes.
void require_strides(const std::string& family, const char* buffer, const TensorStrides& s,
                     std::int64_t element_bytes);

/// The spread of the scores scale * q_i.k_j, sigma = scale sqrt(head_dim)
/// RMS(q) RMS(k): about 1.3 for the workloads' q and k (uniform in [-2, 2))
/// at the default scale. An error of relative size e in each q and k element
/// puts an absolute error of about sqrt(2/3) e sigma in each score.
double score_spread(const Problem& p, const std::vector<double>& q, const std::vector<double>& k, double scale);
/// What a tf32 (f32) result's tolerance is multiplied by at softmax scale
/// `scale`: sigma / sigma at the default scale, which is scale /
/// default_scale(head_dim), at least 1 (1 for 16-bit inputs). tf32 rounds q
/// and k (u = 2^-11), so the scores carry an absolute error of about u
/// sigma, which the softmax turns into relative errors of P of that size
/// (dP / P = ds - sum_k P_k ds_k). The tolerances are set at the default
/// scale, where that error is part of what they cover; past it, it grows
/// with sigma and the rest does not, so the tolerance times sigma / sigma0
/// covers both. 16-bit inputs are exact in their products: their scores
/// round in fp32 (2^-24 sigma), far below what P's rounding to 16 bits adds.
double score_error_growth(const Problem& p, double scale);
/// sum_j P_ij^2 for each query row i (batch, heads, seq) that `checked`
/// checks, P_ij = exp(scale q_i.k_j - lse_i) over the keys row i sees, 0 for
/// the rows it leaves out: 1 for a row of one key, about e^(sigma^2) / keys
/// for a row of many keys whose scores spread by sigma. q: (batch, seq,
/// heads, head_dim), k: (batch, seq, kv_heads, head_dim), lse as the
/// forward's (natural log).
std::vector<double> softmax_square_sums(const AttentionShape& s, const std::vector<std::uint8_t>& checked,
                                        const std::vector<double>& q, const std::vector<double>& k,
                                        const std::vector<double>& lse, double scale);

/// Multiply-adds of fp64 reference a workload may spend (about a second):
/// past it, only a seeded sample of rows is checked.
inline constexpr double kReferenceBudget = double(std::int64_t{1} << 30);

/// The query rows a workload checks against the fp64 reference, (batch,
/// heads, seq), 1 = checked. Every row when the reference over all of them
/// costs at most kReferenceBudget (`cost_per_key` multiply-adds per (row,
/// key seen)); else a seeded sample: at most two (batch, head) pairs, rows
/// drawn within them up to the budget, the last row always among them (it
/// sees every key). The other rows get q = 0 and, in the backward, dO = 0:
/// their O is the mean of the V rows they see and their lse the log of how
/// many (fill_unchecked, exact and cheap), and they add nothing to dQ, dK
/// or dV, so every output element still has an exact expected value.
std::vector<std::uint8_t> sample_rows(const AttentionShape& s, std::uint64_t seed, double cost_per_key);
/// O and lse of the rows `checked` leaves out (q_i = 0): O_i = mean of v_j
/// over the keys row i sees, lse_i = log(keys seen). q, o: (batch, seq,
/// heads, head_dim); v: (batch, seq, kv_heads, head_dim); lse (batch, heads, seq).
void fill_unchecked(const AttentionShape& s, const std::vector<std::uint8_t>& checked, const std::vector<double>& v,
                    std::vector<double>& o, std::vector<double>& lse);
/// Whether `checked` leaves some rows out: a sample.
bool is_sample(const std::vector<std::uint8_t>& checked);
/// One flag per element of a (batch, seq, heads, head_dim) tensor: 1 in the rows `checked` holds, so a check
/// judges the sample's rows apart from the others (HostBuffer::apart).
std::vector<std::uint8_t> checked_elements(const AttentionShape& s, const std::vector<std::uint8_t>& checked);
/// Sets row i of every (batch, seq, heads, head_dim) tensor in `tensors` to 0 where `checked` is 0.
void zero_unchecked(const AttentionShape& s, const std::vector<std::uint8_t>& checked,
                    std::vector<std::vector<double>*> tensors);

}  // namespace ktune::templates::attention
