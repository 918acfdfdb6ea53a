// Host emulation of the warp-level matrix instructions kt.cuh exposes:
// mma.sync (m16n8k16 bf16/f16, m16n8k8 bf16/f16 and tf32, fp32 accumulate),
// ldmatrix (x1/x2/x4, .trans), cp.async with commit/wait groups, and the
// bulk reductions of cp.reduce.async.bulk (.add.f32) with theirs.
//
// Each emulation gathers the warp's registers with one warp exchange and then
// places elements exactly by the fragment layouts of the PTX ISA ("Matrix
// Fragments for mma.m16n8k16 / mma.m16n8k8", "ldmatrix"), with
//   group = lane / 4, tig = lane % 4 (threadID_in_group),
// and the lower-indexed element of a packed pair in the low 16 bits. A kernel
// that places fragments any other way gets a wrong product, as on a GPU.
// Products are exact in fp32; sums run in fp32 in k order starting from C.
// A GPU lands a cp.async copy at any time between its issue and the wait
// that covers it. Here a thread's copies land at one of the two ends
// (Thread::async_early, set by the runner's schedule): at the wait, so a
// missing wait reads stale shared memory, or when issued, so a refill that
// a missing barrier lets overtake another warp's reads of the same stage
// overwrites them. A bulk reduction reads its shared memory, and adds it to
// global memory, at the same ends: at the wait that covers it, so shared
// memory written again before that wait is what it adds.
#pragma once
#include <cstdint>
#include <cstring>

#include "common/kt_emu_abi.hpp"
#include "common/kt_emu_types.hpp"

namespace kt {
namespace emu {

/// 16-bit element `half` (0 low, 1 high) of a packed register, as float.
template <bool BF16>
inline float unpack16(unsigned r, int half) {
  const auto bits = static_cast<std::uint16_t>(half ? r >> 16 : r & 0xffffu);
  return BF16 ? bf16_to_float(bits) : half_to_float(bits);
}
/// The tf32 value an mma reads from an fp32 register: the low 13 mantissa bits are ignored.
inline float tf32_value(unsigned r) { return bits_float(r & 0xffffe000u); }

/// What one lane holds for an mma: A, B, C registers (unused ones zero).
struct MmaLane {
  unsigned a[4];
  unsigned b[2];
  float c[4];
};

/// Gathers the warp's fragments; every lane of the warp must call it.
inline void mma_gather(const unsigned* a, int na, const unsigned* b, int nb, const float* c, MmaLane (&all)[32]) {
  MmaLane mine{};
  for (int i = 0; i < na; ++i) mine.a[i] = a[i];
  for (int i = 0; i < nb; ++i) mine.b[i] = b[i];
  for (int i = 0; i < 4; ++i) mine.c[i] = c[i];
  warp_gather_whole("mma.sync", mine, all);
}

/// D (16x8) = A (16xK) * B (Kx8) + C for K = 16 or 8 with 16-bit inputs.
template <bool BF16, int K>
inline void mma_16bit(float d[4], const unsigned* a, const unsigned* b, const float c[4]) {
  MmaLane all[32];
  mma_gather(a, K / 4, b, K / 8, c, all);
  float A[16][K], B[K][8], C[16][8];
  for (unsigned l = 0; l < 32; ++l) {
    const unsigned g = l / 4, t = l % 4;
    for (int r = 0; r < K / 4; ++r) {  // a: {row g, g+8} x {k 2t.., 2t+8..}, row half first
      const unsigned row = g + 8 * (r & 1), col = 2 * t + 8 * (r >> 1);
      A[row][col] = unpack16<BF16>(all[l].a[r], 0);
      A[row][col + 1] = unpack16<BF16>(all[l].a[r], 1);
    }
    for (int r = 0; r < K / 8; ++r) {  // b: k 2t + 8r (+1), n = g
      B[2 * t + 8 * r][g] = unpack16<BF16>(all[l].b[r], 0);
      B[2 * t + 8 * r + 1][g] = unpack16<BF16>(all[l].b[r], 1);
    }
    for (int i = 0; i < 4; ++i) C[g + 8 * (i >> 1)][2 * t + (i & 1)] = all[l].c[i];
  }
  const unsigned lane = self()->lane, g = lane / 4, t = lane % 4;
  for (int i = 0; i < 4; ++i) {
    const unsigned row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
    float acc = C[row][col];
    for (int k = 0; k < K; ++k) acc = fmaf(A[row][k], B[k][col], acc);
    d[i] = acc;
  }
}

/// Lands one cp.async copy: `src_bytes` read, the rest of `bytes` zero-filled.
inline void async_run(const AsyncCopy& c) {
  std::memcpy(c.dst, c.src, c.src_bytes);
  if (c.bytes > c.src_bytes) std::memset(static_cast<char*>(c.dst) + c.src_bytes, 0, c.bytes - c.src_bytes);
}
/// Whether [p, p + bytes) lies in the block's shared memory: its static __shared__ variables or its dynamic
/// shared memory.
inline bool in_shared(const void* p, std::size_t bytes) {
  const Thread* t = self();
  const auto* c = static_cast<const unsigned char*>(p);
  const auto within = [&](const unsigned char* begin, std::size_t size) {
    return begin && c >= begin && c + bytes <= begin + size;
  };
  return within(t->static_smem, t->static_smem_bytes) || within(t->dynamic_smem, t->dynamic_smem_bytes);
}

inline void async_issue(void* dst, const void* src, unsigned bytes, unsigned src_bytes) {
  Thread* t = self();
  if (!in_shared(dst, bytes)) {
    char message[256];
    __builtin_snprintf(message, sizeof message,
                       "cp.async of %u bytes to %p, which is not in the block's shared memory: cp.async copies "
                       "global memory into shared memory",
                       bytes, dst);
    t->host->fail(t, message);
  }
  if ((reinterpret_cast<unsigned long>(dst) | reinterpret_cast<unsigned long>(src)) % bytes != 0) {
    char message[256];
    __builtin_snprintf(message, sizeof message,
                       "cp.async of %u bytes from %p to %p: both addresses must be %u-byte aligned; "
                       "a GPU ends the kernel with 'misaligned address'",
                       bytes, src, dst, bytes);
    t->host->fail(t, message);
  }
  if (src_bytes > bytes) src_bytes = bytes;
  t->async.issue(AsyncCopy{dst, src, bytes, src_bytes, 0}, t->async_early, async_run);
}

/// Adds one bulk reduction's floats, element by element (a GPU's L2 adds them atomically).
inline void bulk_run(const BulkReduce& op) {
  for (unsigned i = 0; i < op.count; ++i) atomicAdd(op.dst + i, op.src[i]);
}
inline void bulk_issue(float* dst, const float* src, unsigned bytes) {
  Thread* t = self();
  if ((reinterpret_cast<unsigned long>(dst) | reinterpret_cast<unsigned long>(src)) % 16 != 0 || bytes % 16 != 0) {
    char message[256];
    __builtin_snprintf(message, sizeof message,
                       "cp.reduce.async.bulk of %u bytes from %p to %p: both addresses 16-byte aligned and the size "
                       "a multiple of 16",
                       bytes, static_cast<const void*>(src), static_cast<void*>(dst));
    t->host->fail(t, message);
  }
  t->bulk.issue(BulkReduce{dst, src, bytes / 4, 0}, t->async_early, bulk_run);
}

/// ldmatrix: lanes 8i..8i+7 give the row addresses of matrix i (8 rows of 8 b16).
template <int N, bool TRANS>
inline void ldmatrix(unsigned* d, const void* row) {
  const void* rows[32];
  warp_gather_whole("ldmatrix", row, rows);
  // The rows the N matrices take (lanes 0 to 8N - 1 give them): 16 bytes each, in shared memory and 16-byte
  // aligned, as PTX's ldmatrix requires (a GPU faults on a misaligned one and reads shared memory alone).
  for (int r = 0; r < 8 * N; ++r)
    if (reinterpret_cast<unsigned long>(rows[r]) % 16 != 0 || !in_shared(rows[r], 16)) {
      char message[256];
      __builtin_snprintf(message, sizeof message,
                         "ldmatrix row address %p from lane %d is %s: each of the rows must be 16-byte aligned "
                         "shared memory",
                         rows[r], r,
                         reinterpret_cast<unsigned long>(rows[r]) % 16 != 0 ? "not 16-byte aligned"
                                                                           : "not in the block's shared memory");
      Thread* t = self();
      t->host->fail(t, message);
    }
  const unsigned lane = self()->lane, g = lane / 4, t = lane % 4;
  for (int i = 0; i < N; ++i) {
    auto element = [&](unsigned r, unsigned c) {
      std::uint16_t v;
      std::memcpy(&v, static_cast<const char*>(rows[8 * i + r]) + 2 * c, 2);
      return static_cast<unsigned>(v);
    };
    // Plain: lane holds row g, columns 2t and 2t+1. Transposed: column g of rows 2t, 2t+1.
    d[i] = TRANS ? element(2 * t, g) | element(2 * t + 1, g) << 16 : element(g, 2 * t) | element(g, 2 * t + 1) << 16;
  }
}

}  // namespace emu

// ---- the kt:: API (same signatures as the GPU half of kt.cuh) ---------------------

/// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: d = a * b + c.
inline void mma_m16n8k16_bf16(float d[4], const unsigned a[4], const unsigned b[2], const float c[4]) {
  emu::mma_16bit<true, 16>(d, a, b, c);
}
/// mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32.
inline void mma_m16n8k16_f16(float d[4], const unsigned a[4], const unsigned b[2], const float c[4]) {
  emu::mma_16bit<false, 16>(d, a, b, c);
}
/// mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32.
inline void mma_m16n8k8_bf16(float d[4], const unsigned a[2], const unsigned b[1], const float c[4]) {
  emu::mma_16bit<true, 8>(d, a, b, c);
}
/// mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32.
inline void mma_m16n8k8_f16(float d[4], const unsigned a[2], const unsigned b[1], const float c[4]) {
  emu::mma_16bit<false, 8>(d, a, b, c);
}
/// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32; registers hold tf32 values (see float_to_tf32).
inline void mma_m16n8k8_tf32(float d[4], const unsigned a[4], const unsigned b[2], const float c[4]) {
  emu::MmaLane all[32];
  emu::mma_gather(a, 4, b, 2, c, all);
  float A[16][8], B[8][8], C[16][8];
  for (unsigned l = 0; l < 32; ++l) {
    const unsigned g = l / 4, t = l % 4;
    for (int r = 0; r < 4; ++r) A[g + 8 * (r & 1)][t + 4 * (r >> 1)] = emu::tf32_value(all[l].a[r]);
    for (int r = 0; r < 2; ++r) B[t + 4 * r][g] = emu::tf32_value(all[l].b[r]);
    for (int i = 0; i < 4; ++i) C[g + 8 * (i >> 1)][2 * t + (i & 1)] = all[l].c[i];
  }
  const unsigned lane = emu::self()->lane, g = lane / 4, t = lane % 4;
  for (int i = 0; i < 4; ++i) {
    const unsigned row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
    float acc = C[row][col];
    for (int k = 0; k < 8; ++k) acc = fmaf(A[row][k], B[k][col], acc);
    d[i] = acc;
  }
}
/// cvt.rna.tf32.f32: round to the nearest tf32, ties away from zero; the result is fp32 bits.
inline unsigned float_to_tf32(float x) {
  const unsigned u = emu::float_bits(x);
  if ((u & 0x7f800000u) == 0x7f800000u) return u;  // inf, NaN unchanged
  return (u + 0x1000u) & 0xffffe000u;
}

/// ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{,.trans}.shared.b16; `row` is this lane's row address.
inline void ldmatrix_x1(unsigned d[1], const void* row) { emu::ldmatrix<1, false>(d, row); }
inline void ldmatrix_x2(unsigned d[2], const void* row) { emu::ldmatrix<2, false>(d, row); }
inline void ldmatrix_x4(unsigned d[4], const void* row) { emu::ldmatrix<4, false>(d, row); }
inline void ldmatrix_x1_trans(unsigned d[1], const void* row) { emu::ldmatrix<1, true>(d, row); }
inline void ldmatrix_x2_trans(unsigned d[2], const void* row) { emu::ldmatrix<2, true>(d, row); }
inline void ldmatrix_x4_trans(unsigned d[4], const void* row) { emu::ldmatrix<4, true>(d, row); }

/// cp.async.{ca,cg}.shared.global: copies complete by the covering cp_async_wait.
inline void cp_async_4(void* smem, const void* gmem) { emu::async_issue(smem, gmem, 4, 4); }
inline void cp_async_8(void* smem, const void* gmem) { emu::async_issue(smem, gmem, 8, 8); }
inline void cp_async_16(void* smem, const void* gmem) { emu::async_issue(smem, gmem, 16, 16); }
/// 16-byte copy reading only `src_bytes` (0..16) and zero-filling the rest.
inline void cp_async_16_zfill(void* smem, const void* gmem, unsigned src_bytes) {
  emu::async_issue(smem, gmem, 16, src_bytes);
}
/// cp.async.commit_group.
inline void cp_async_commit() { emu::self()->async.commit(); }
/// cp.async.wait_group N: all but the N most recent committed groups are complete.
template <int N>
inline void cp_async_wait() {
  emu::self()->async.wait(N, emu::async_run);
}
/// cp.async.wait_all: every copy, committed or not, is complete.
inline void cp_async_wait_all() {
  emu::Thread* t = emu::self();
  t->async.commit();
  t->async.complete(~0u, emu::async_run);
}

/// cp.reduce.async.bulk .add.f32 (kt.cuh): gmem[i] += smem[i], bytes / 4 floats.
inline void bulk_reduce_add(float* gmem, const float* smem, unsigned bytes) { emu::bulk_issue(gmem, smem, bytes); }
/// cp.async.bulk.commit_group.
inline void bulk_commit() { emu::self()->bulk.commit(); }
/// cp.async.bulk.wait_group.read N: all but the N most recent committed groups are complete.
template <int N>
inline void bulk_wait_read() {
  emu::self()->bulk.wait(N, emu::bulk_run);
}

}  // namespace kt
