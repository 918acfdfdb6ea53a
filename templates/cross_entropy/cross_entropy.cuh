// Softmax cross-entropy kernels over the vocabulary (reference:
// templates/cross_entropy/reference.hpp). Logits and dlogits are of type T
// (float, or __nv_bfloat16 in bf16 mixed precision); targets are int32;
// losses, lse and all math are fp32.
//   cross_entropy_fwd  loss = lse - logits[target] per row, lse = logsumexp(row)
//                      kept for the backward; one pass over the row, the max
//                      and the sum of exponentials found together ("online");
//                      the exponentials, and the rescales of the sum, by
//                      kt::exp_approx (one special function instruction each)
//   cross_entropy_bwd  dlogits = scale * (softmax - onehot(target)) per row,
//                      from the forward's lse; dlogits may be logits
//
// Layout (both kernels): the row layout of common/rows.cuh. A row of 10,000
// logits is far more than registers hold, so threads stream it: in
// each step thread t of a row takes UNROLL vectors of VEC elements, vectors
// u * ROW_THREADS + t of the step (coalesced across the row's threads), and
// issues the step's loads before its exponentials (the forward with
// PREFETCH: the next step's too). Vectors start at
// VEC-aligned addresses: the elements of a row before its first aligned
// address (the "head") and after its last whole vector (the "tail"), fewer
// than VEC each, go one per thread. So any vocabulary, and any
// element-aligned pointer, works with any VEC.
//
// A target outside [0, vocab) is never dereferenced: the forward writes a NaN
// loss for its row (lse as usual) and the backward writes NaN over its row of
// dlogits, so a bad batch shows in the mean loss and in the gradients instead
// of training on a wrong one. No memory outside the row's logits is read.
#pragma once
#include "common/rows.cuh"

namespace cross_entropy {

using kt::negative_infinity;
KT_DEVICE float quiet_nan() { return __uint_as_float(0x7fc00000u); }

/// A running logsumexp (kt.cuh): the largest logit seen and the sum of
/// exp(logit - max); the empty state is {-inf, 0}.
using MaxSum = kt::MaxSumExp;

/// Adds one logit to `acc`. A NaN logit makes the max and the sum NaN (as
/// PyTorch's loss is NaN for its row), where `x > max` would pass over it.
KT_DEVICE void absorb(MaxSum& acc, float x) {
  if (!(x <= acc.max)) {
    acc.sum = acc.sum * kt::exp_approx(acc.max - x) + 1.0f;  // exp of -inf is 0 for the first one
    acc.max = x;
  } else if (acc.max != negative_infinity()) {
    acc.sum += kt::exp_approx(x - acc.max);
  }
}

/// Elements before the first VEC-aligned address of `row`, at most `vocab`.
template <int VEC, class T>
KT_DEVICE int head_elements(const T* row, int vocab) {
  const auto element = reinterpret_cast<unsigned long long>(row) / sizeof(T);
  const int head = static_cast<int>((VEC - element % VEC) % VEC);
  return head < vocab ? head : vocab;
}

/// A row split into its VEC-aligned vectors and the elements around them.
struct RowSplit {
  int head;      // elements before the first VEC-aligned address
  int vectors;   // whole vectors from there
  int body_end;  // the column after the last whole vector
  int edges;     // head and tail elements together, taken one at a time

  /// Column of edge element `i` (i < edges): the head's, then the tail's.
  KT_DEVICE int edge_column(int i) const { return i < head ? i : body_end + (i - head); }
};
template <int VEC, class T>
KT_DEVICE RowSplit split_row(const T* row, int vocab) {
  const int head = head_elements<VEC>(row, vocab);
  const int vectors = (vocab - head) / VEC;
  const int body_end = head + vectors * VEC;
  return {head, vectors, body_end, head + (vocab - body_end)};
}

/// This thread's part of the logsumexp of `row` (vocab,): one pass, and per
/// step of UNROLL vectors one rescale of the running sum. With PREFETCH the
/// next step's vectors are loaded before this step's exponentials, so the
/// loads are in flight while the special function unit works, where a step's
/// loads would otherwise wait for the previous step's sum.
template <int ROW_THREADS, int VEC, int UNROLL, bool PREFETCH, class T>
KT_DEVICE MaxSum row_part(const T* row, int vocab, int t) {
  MaxSum acc = {negative_infinity(), 0.0f};
  const RowSplit split = split_row<VEC>(row, vocab);
  const int vectors = split.vectors;
  for (int i = t; i < split.edges; i += ROW_THREADS) absorb(acc, kt::to_float(row[split.edge_column(i)]));

  const kt::Vec<T, VEC>* body = reinterpret_cast<const kt::Vec<T, VEC>*>(row + split.head);
  struct Step {
    kt::Vec<T, VEC> v[UNROLL];
  };
  constexpr int STRIDE = ROW_THREADS * UNROLL;  // vectors of the row per step
  const auto load = [&](Step& x, int step) {
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int j = step + u * ROW_THREADS + t;
      if (j < vectors) x.v[u] = body[j];
    }
  };
  Step ahead;
  if constexpr (PREFETCH) load(ahead, 0);
  for (int step = 0; step < vectors; step += STRIDE) {
    Step x;
    if constexpr (PREFETCH) {
      x = ahead;
      load(ahead, step + STRIDE);
    } else {
      load(x, step);
    }
    float step_max = negative_infinity();
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      if (step + u * ROW_THREADS + t < vectors)
#pragma unroll
        for (int k = 0; k < VEC; ++k) step_max = kt::max_nan(step_max, kt::to_float(x.v[u].v[k]));
    }
    if (step_max == negative_infinity()) continue;  // nothing loaded, or only -inf: adds 0
    if (!(step_max <= acc.max)) {  // a NaN among them too: max and sum NaN

      acc.sum *= kt::exp_approx(acc.max - step_max);
      acc.max = step_max;
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      if (step + u * ROW_THREADS + t < vectors)
#pragma unroll
        for (int k = 0; k < VEC; ++k) acc.sum += kt::exp_approx(kt::to_float(x.v[u].v[k]) - acc.max);
    }
  }
  return acc;
}

template <int THREADS, int ROW_THREADS, int VEC, int UNROLL, class T>
KT_DEVICE void check_layout() {
  kt::check_row_layout<THREADS, ROW_THREADS, VEC, T>();
  static_assert(VEC == 1 || VEC == 2 || VEC == 4 || VEC == 8, "vector width is 1, 2, 4 or 8 elements");
  static_assert(UNROLL >= 1 && UNROLL <= 4,
                "a thread takes 1 to 4 vectors per step, the range checked to fit in registers");
}

/// Grid: ceil(rows / (THREADS / ROW_THREADS)) blocks; block b takes rows
/// b * THREADS / ROW_THREADS, ... (the last block may hold fewer rows).
template <int THREADS,      // threads per block: more rows per block vs more blocks in flight
          int ROW_THREADS,  // threads per row: few keep the merge in shuffles, many shorten each thread's stream
          int VEC,          // elements per access (up to 16 bytes): wider loads, fewer instructions
          int UNROLL,       // vectors per thread per step: more loads in flight, fewer rescales, more registers
          bool PREFETCH,    // the next step's loads issued before this step's exponentials: overlap vs registers
          class T>          // float or __nv_bfloat16
__global__ void __launch_bounds__(THREADS)
    cross_entropy_fwd(const T* logits,    // (rows, vocab)
                      const int* targets,  // (rows,)
                      float* losses,       // (rows,)
                      float* lse,          // (rows,) logsumexp, for the backward
                      long long rows, int vocab) {
  kt::wait_previous_kernel();
  check_layout<THREADS, ROW_THREADS, VEC, UNROLL, T>();
  __shared__ MaxSum warp_parts[THREADS / 32];
  // An inactive slot (the last block's spare) still joins the merge, with nothing.
  const kt::RowSlot s = kt::row_slot<THREADS, ROW_THREADS>(rows);
  const T* x = logits + (s.active ? s.row : 0) * vocab;
  // The row's first thread loads its target before the stream and the
  // target's logit before the merge, so neither load waits at the end.
  const bool first = s.active && s.t == 0;
  const int target = first ? targets[s.row] : -1;

  MaxSum acc = {negative_infinity(), 0.0f};
  if (s.active) acc = row_part<ROW_THREADS, VEC, UNROLL, PREFETCH>(x, vocab, s.t);
  const bool valid = target >= 0 && target < vocab;
  const float target_logit = valid ? kt::to_float(x[target]) : 0.0f;
  acc = kt::row_reduce<THREADS, ROW_THREADS>(acc, warp_parts, kt::MaxSumExpOp{});
  if (!first) return;
  const float log_sum = logf(acc.sum);
  lse[s.row] = acc.max + log_sum;
  // max - x[target] first: the two large terms cancel exactly, then the small log.
  losses[s.row] = valid ? (acc.max - target_logit) + log_sum : quiet_nan();
}

/// dlogits for columns of one row: scale * exp(x - lse), and at the target
/// scale * (exp(x - lse) - 1) as expm1, exact where a confident prediction
/// makes it tiny; V is VEC when logits and dlogits share their alignment, else 1.
/// A vector's elements are all taken as plain columns, branch free, and only
/// the vector that holds the target (one a row) takes the target's again.
template <int ROW_THREADS, int V, int UNROLL, class T>
KT_DEVICE void row_gradient(const T* x, T* d, int vocab, int target, float row_lse, float scale, int t) {
  const auto plain = [&](float logit) { return kt::from_float<T>(scale * kt::exp_approx(logit - row_lse)); };
  const auto at_target = [&](float logit) { return kt::from_float<T>(scale * expm1f(logit - row_lse)); };
  const RowSplit split = split_row<V>(x, vocab);
  const int head = split.head, vectors = split.vectors;
  for (int i = t; i < split.edges; i += ROW_THREADS) {
    const int c = split.edge_column(i);
    const float logit = kt::to_float(x[c]);
    d[c] = c == target ? at_target(logit) : plain(logit);
  }
  const kt::Vec<T, V>* in = reinterpret_cast<const kt::Vec<T, V>*>(x + head);
  kt::Vec<T, V>* out = reinterpret_cast<kt::Vec<T, V>*>(d + head);
  for (int step = 0; step < vectors; step += ROW_THREADS * UNROLL) {
    kt::Vec<T, V> v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int j = step + u * ROW_THREADS + t;
      if (j < vectors) v[u] = in[j];
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int j = step + u * ROW_THREADS + t;
      if (j < vectors) {
        kt::Vec<T, V> g;
        // Unsigned: any target, out of range ones too, without overflow.
        const unsigned first = static_cast<unsigned>(head + j * V);
        if (static_cast<unsigned>(target) - first < static_cast<unsigned>(V)) {
#pragma unroll
          for (int k = 0; k < V; ++k) {
            const float logit = kt::to_float(v[u].v[k]);
            g.v[k] = first + k == static_cast<unsigned>(target) ? at_target(logit) : plain(logit);
          }
        } else {
#pragma unroll
          for (int k = 0; k < V; ++k) g.v[k] = plain(kt::to_float(v[u].v[k]));
        }
        out[j] = g;
      }
    }
  }
}

/// Grid: as cross_entropy_fwd. `dlogits` may be `logits` (the gradient
/// computed in place, as the model's backward does): each element is read and
/// written by one thread, loads before stores, so the two carry no
/// __restrict__. When the two are not aligned alike modulo a vector, every
/// access is scalar.
template <int THREADS, int ROW_THREADS, int VEC, int UNROLL, class T>
__global__ void __launch_bounds__(THREADS)
    cross_entropy_bwd(const T* logits,    // (rows, vocab)
                      const int* targets,  // (rows,)
                      const float* lse,    // (rows,) from cross_entropy_fwd
                      T* dlogits,          // (rows, vocab), may be logits
                      long long rows, int vocab,
                      float scale) {       // d total loss / d row loss (1 / rows for the mean)
  kt::wait_previous_kernel();
  check_layout<THREADS, ROW_THREADS, VEC, UNROLL, T>();
  const kt::RowSlot s = kt::row_slot<THREADS, ROW_THREADS>(rows);
  if (!s.active) return;  // no barriers below
  // Both loads issued before either is used: an out-of-range target matches
  // no column, and a NaN lse makes the row NaN.
  const int target = targets[s.row];
  const float loaded_lse = lse[s.row];
  const float row_lse = target >= 0 && target < vocab ? loaded_lse : quiet_nan();
  const T* x = logits + s.row * vocab;
  T* d = dlogits + s.row * vocab;
  const auto apart = reinterpret_cast<unsigned long long>(dlogits) - reinterpret_cast<unsigned long long>(logits);
  if (apart % (sizeof(T) * VEC) == 0)
    row_gradient<ROW_THREADS, VEC, UNROLL>(x, d, vocab, target, row_lse, scale, s.t);
  else
    row_gradient<ROW_THREADS, 1, UNROLL>(x, d, vocab, target, row_lse, scale, s.t);
}

}  // namespace cross_entropy
