// Host emulation of Hopper's warpgroup matrix instructions (the GPU half is
// templates/common/wgmma.cuh): wgmma.mma_async in its ss and rs forms, the
// shared-memory matrix descriptor, and fence / commit_group / wait_group.
//
// Every thread computes its own part of D (its rows g and g + 8 of its
// warp's 16, its columns 2t, 2t + 1 of each n8 block) from the operands:
// shared-memory ones read element by element through the descriptor by the
// layouts of the PTX ISA ("Shared Memory Matrix Layout"; see wgmma.cuh),
// register ones from its quad's A fragments, gathered when issued. Products
// are exact in fp32; sums run in fp32 in k order starting from D (or 0).
//
// Shared-memory addresses are offsets into the block's dynamic shared
// memory, and the swizzle XORs their bits: a descriptor of anything else
// fails the block. As cp.async copies, an instruction completes either at
// the wait that covers it, so D read before the wait holds its old values
// and operands overwritten before it are read overwritten, or when issued
// (Thread::async_early). A thread that ends with one in flight fails the block.
#pragma once
#include <cstdint>
#include <cstring>

#include "common/kt_emu_abi.hpp"
#include "common/kt_emu_types.hpp"

namespace kt {
namespace emu {

/// Byte offset in dynamic shared memory of element (i, k) of a wgmma operand
/// (i its row: M for A, N for B; k in 0..15), by its descriptor's layout.
inline unsigned wgmma_offset(unsigned long long desc, unsigned i, unsigned k, bool mn_major) {
  const unsigned start = static_cast<unsigned>(desc & 0x3fffu) << 4;
  const unsigned lbo = static_cast<unsigned>(desc >> 16 & 0x3fffu) << 4;
  const unsigned sbo = static_cast<unsigned>(desc >> 32 & 0x3fffu) << 4;
  static const unsigned kChunksPerRow[4] = {1, 8, 4, 2};  // swizzle mode: none, 128, 64, 32 bytes
  const unsigned w = kChunksPerRow[desc >> 62];
  unsigned offset;
  if (!mn_major)
    offset = start + (i % 8) * w * 16 + (i / 8) * sbo + (k / 8) * (w == 1 ? lbo : 16) + (k % 8) * 2;
  else if (w == 1)
    offset = start + (i / 8) * sbo + (k % 8) * 16 + (k / 8) * lbo + (i % 8) * 2;
  else
    offset = start + (i / 8 % w) * 16 + (i / (8 * w)) * lbo + (k % 8) * w * 16 + (k / 8) * sbo + (i % 8) * 2;
  return offset ^ ((offset >> 7) & (w - 1)) << 4;
}

template <bool BF16>
inline float wgmma_element(unsigned bits) {
  const auto h = static_cast<std::uint16_t>(bits);
  return BF16 ? bf16_to_float(h) : half_to_float(h);
}

/// Runs one wgmma of this thread: its 4 * (n / 8) elements of D.
inline void wgmma_run(Thread* t, const Wgmma& op) {
  const unsigned g = t->lane / 4, tig = t->lane % 4, warp_rows = 16 * (t->warp % 4);
  auto shared = [&](unsigned long long desc, unsigned i, unsigned k, bool mn_major) {
    const unsigned offset = wgmma_offset(desc, i, k, mn_major);
    if (offset + 2 > t->dynamic_smem_bytes) {
      char message[200];
      __builtin_snprintf(message, sizeof message,
                         "wgmma reads byte %u of dynamic shared memory, past its %zu bytes (descriptor 0x%016llx)",
                         offset, t->dynamic_smem_bytes, desc);
      t->host->fail(t, message);
    }
    std::uint16_t bits;
    std::memcpy(&bits, t->dynamic_smem + offset, 2);
    return op.bf16 ? wgmma_element<true>(bits) : wgmma_element<false>(bits);
  };
  float a[2][16];  // this thread's rows g and g + 8 of A
  for (unsigned r = 0; r < 2; ++r)
    for (unsigned k = 0; k < 16; ++k) {
      if (op.a_in_registers) {
        // Lane 4g + k % 8 / 2 holds (row g, k) in register k / 8 * 2 and (g + 8, k) in k / 8 * 2 + 1.
        const unsigned reg = op.a[4 * (k % 8 / 2) + k / 8 * 2 + r];
        const unsigned bits = k % 2 ? reg >> 16 : reg;
        a[r][k] = op.bf16 ? wgmma_element<true>(bits) : wgmma_element<false>(bits);
      } else {
        a[r][k] = shared(op.desc_a, warp_rows + 8 * r + g, k, op.trans_a);
      }
    }
  for (unsigned j = 0; j < op.n / 8; ++j)
    for (unsigned e = 0; e < 4; ++e) {
      const unsigned col = 8 * j + 2 * tig + e % 2;
      float acc = op.accumulate ? op.d[4 * j + e] : 0.0f;
      for (unsigned k = 0; k < 16; ++k) acc = fmaf(a[e / 2][k], shared(op.desc_b, col, k, op.trans_b), acc);
      op.d[4 * j + e] = acc;
    }
}

inline void wgmma_issue(Wgmma op) {
  Thread* t = self();
  if (t->block_dim.x * t->block_dim.y * t->block_dim.z % 128 != 0)
    t->host->fail(t, "wgmma needs whole warpgroups: a block of a multiple of 128 threads");
  t->wgmma.issue(op, t->async_early, [t](const Wgmma& w) { wgmma_run(t, w); });
}

}  // namespace emu

// ---- the kt:: API of wgmma.cuh ----------------------------------------------------------

/// The address a descriptor holds (wgmma.cuh's wgmma_desc): the offset of
/// `smem` in the block's dynamic shared memory, the only shared memory the
/// emulation's wgmma reads.
inline unsigned wgmma_address(const void* smem) {
  emu::Thread* t = emu::self();
  const auto* p = static_cast<const unsigned char*>(smem);
  if (p < t->dynamic_smem || p >= t->dynamic_smem + t->dynamic_smem_bytes || (p - t->dynamic_smem) % 16 != 0)
    t->host->fail(t, "wgmma_desc: the operand must start 16-byte aligned inside the block's dynamic shared memory");
  return static_cast<unsigned>(p - t->dynamic_smem);
}
inline void wgmma_fence() {}
inline void fence_proxy_async() {}
template <int R>
inline void wgmma_fence_operand(float (&)[R]) {}
/// wgmma.commit_group.
inline void wgmma_commit() { emu::self()->wgmma.commit(); }
/// wgmma.wait_group N: all but the N most recent committed groups are complete.
template <int N>
inline void wgmma_wait() {
  emu::Thread* t = emu::self();
  t->wgmma.wait(N, [t](const emu::Wgmma& w) { emu::wgmma_run(t, w); });
}

template <class T>
inline constexpr bool wgmma_bf16() {
  static_assert(sizeof(T) == 2, "wgmma takes bf16 or f16 inputs");
  return std::is_same_v<T, __nv_bfloat16>;
}
template <int N>
inline constexpr void wgmma_check_n() {
  static_assert(N == 16 || N == 32 || N == 64 || N == 96 || N == 128 || N == 192 || N == 256,
                "wgmma: N is one of 16, 32, 64, 96, 128, 192, 256");
}

/// D (64 x N) = A * B (+ D), A and B in shared memory (wgmma.cuh).
template <int N, class T, int TRANS_A, int TRANS_B>
inline void wgmma_ss(float (&d)[N / 2], unsigned long long a, unsigned long long b, bool accumulate) {
  wgmma_check_n<N>();
  emu::Wgmma op{};
  op.d = d;
  op.desc_a = a;
  op.desc_b = b;
  op.n = N;
  op.bf16 = wgmma_bf16<T>();
  op.accumulate = accumulate;
  op.trans_a = TRANS_A;
  op.trans_b = TRANS_B;
  emu::wgmma_issue(op);
}

/// As wgmma_ss with this warp's 16 rows of A in registers (mma.m16n8k16's A fragment).
template <int N, class T, int TRANS_B>
inline void wgmma_rs(float (&d)[N / 2], const unsigned (&a)[4], unsigned long long b, bool accumulate) {
  wgmma_check_n<N>();
  struct Fragment {
    unsigned r[4];
  };
  Fragment all[32];
  emu::warp_gather_whole("wgmma", Fragment{{a[0], a[1], a[2], a[3]}}, all);
  emu::Wgmma op{};
  op.d = d;
  op.desc_b = b;
  const unsigned quad = emu::self()->lane / 4 * 4;
  for (unsigned i = 0; i < 4; ++i)
    for (unsigned r = 0; r < 4; ++r) op.a[4 * i + r] = all[quad + i].r[r];
  op.n = N;
  op.bf16 = wgmma_bf16<T>();
  op.accumulate = accumulate;
  op.trans_b = TRANS_B;
  op.a_in_registers = 1;
  emu::wgmma_issue(op);
}

}  // namespace kt
