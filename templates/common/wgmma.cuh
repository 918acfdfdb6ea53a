// wgmma.cuh: Hopper's warpgroup matrix instructions (wgmma.mma_async, sm_90a)
// for the templates that include it; kt.cuh does not, so no other kernel's
// text changes. The emulation backend supplies the same names on the host
// (templates/common/kt_emu_wgmma.hpp, compiled ahead of the rendered text).
//
// A warpgroup is 4 consecutive warps whose first is a multiple of 4. One
// wgmma_ss / wgmma_rs multiplies A (64 x 16) by B (16 x N) into D (64 x N,
// fp32) and every thread of the warpgroup must call it. A comes from shared
// memory through a descriptor (ss) or from registers (rs: each warp's 16
// rows in mma.m16n8k16's A fragment layout); B always from shared memory.
// D's fragment: warp w of the group holds rows 16w..16w+15; for each n8
// block j, d[4j + 0, 1] are row g, columns 8j + 2t and + 1, d[4j + 2, 3] the
// same columns of row g + 8 (g = lane / 4, t = lane % 4), as mma.sync's C.
//
// The instructions run asynchronously: issue them between wgmma_fence() and
// wgmma_commit(), and read D (or overwrite the shared operands) only after a
// wgmma_wait<N>() that covers their group, then wgmma_fence_operand(d) so the
// compiler does not move D's uses above the wait. Shared memory written by
// ordinary stores or cp.async is seen by wgmma after fence_proxy_async() (and
// the barrier that orders the writers before the readers).
//
// Shared-memory operands (PTX ISA, "Shared Memory Matrix Layout"): in units
// of 16-byte chunks, with element (i, k) of an operand, i its row (M for A,
// N for B) and k in 0..15:
//   K-major (TRANS 0), W = 1 (no swizzle), 2, 4 or 8 (32/64/128-byte swizzle):
//     chunk (i % 8) * W + (i / 8) * SBO + (k / 8) * (W == 1 ? LBO : 1), element k % 8
//   M/N-major (TRANS 1), 8 elements of i per chunk:
//     W == 1: chunk (i / 8) * SBO + (k % 8) + (k / 8) * LBO, element i % 8
//     W > 1:  chunk (i / 8 % W) + (i / (8 W)) * LBO + (k % 8) * W + (k / 8) * SBO, element i % 8
// where LBO and SBO are the descriptor's byte offsets in chunks. A swizzled
// layout then XORs the chunk's index bits 0..log2(W)-1 with the address bits
// 7.. above them (address bits 4-6 with 7-9 for 128 bytes), so an operand
// whose swizzle pattern repeats (8 rows of W chunks) starts on a multiple of
// 8 W chunks of the block's shared memory.
#pragma once
#include "common/kt.cuh"

#if !defined(KT_EMULATION)
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "wgmma.cuh needs the arch-specific target sm_90a"
#endif

// Register lists of D (N / 2 floats) and the instruction texts per N.
// Eight of D's registers at a time: their operand numbers and constraints.
#define KT_WGMMA_R0 "%0, %1, %2, %3, %4, %5, %6, %7"
#define KT_WGMMA_R1 "%8, %9, %10, %11, %12, %13, %14, %15"
#define KT_WGMMA_R2 "%16, %17, %18, %19, %20, %21, %22, %23"
#define KT_WGMMA_R3 "%24, %25, %26, %27, %28, %29, %30, %31"
#define KT_WGMMA_R4 "%32, %33, %34, %35, %36, %37, %38, %39"
#define KT_WGMMA_R5 "%40, %41, %42, %43, %44, %45, %46, %47"
#define KT_WGMMA_R6 "%48, %49, %50, %51, %52, %53, %54, %55"
#define KT_WGMMA_R7 "%56, %57, %58, %59, %60, %61, %62, %63"
#define KT_WGMMA_R8 "%64, %65, %66, %67, %68, %69, %70, %71"
#define KT_WGMMA_R9 "%72, %73, %74, %75, %76, %77, %78, %79"
#define KT_WGMMA_R10 "%80, %81, %82, %83, %84, %85, %86, %87"
#define KT_WGMMA_R11 "%88, %89, %90, %91, %92, %93, %94, %95"
#define KT_WGMMA_R12 "%96, %97, %98, %99, %100, %101, %102, %103"
#define KT_WGMMA_R13 "%104, %105, %106, %107, %108, %109, %110, %111"
#define KT_WGMMA_R14 "%112, %113, %114, %115, %116, %117, %118, %119"
#define KT_WGMMA_R15 "%120, %121, %122, %123, %124, %125, %126, %127"
#define KT_WGMMA_O0(d) \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
#define KT_WGMMA_O1(d) \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define KT_WGMMA_O2(d) \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23])
#define KT_WGMMA_O3(d) \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define KT_WGMMA_O4(d) \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39])
#define KT_WGMMA_O5(d) \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
#define KT_WGMMA_O6(d) \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55])
#define KT_WGMMA_O7(d) \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define KT_WGMMA_O8(d) \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71])
#define KT_WGMMA_O9(d) \
  "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79])
#define KT_WGMMA_O10(d) \
  "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87])
#define KT_WGMMA_O11(d) \
  "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
#define KT_WGMMA_O12(d) \
  "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103])
#define KT_WGMMA_O13(d) \
  "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111])
#define KT_WGMMA_O14(d) \
  "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119])
#define KT_WGMMA_O15(d) \
  "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
// D's register list and constraints for each N, each built on the one before.
#define KT_WGMMA_L16 KT_WGMMA_R0
#define KT_WGMMA_OUT16(d) KT_WGMMA_O0(d)
#define KT_WGMMA_D16 "{" KT_WGMMA_L16 "}"
#define KT_WGMMA_L32 KT_WGMMA_L16 ", " KT_WGMMA_R1
#define KT_WGMMA_OUT32(d) KT_WGMMA_OUT16(d), KT_WGMMA_O1(d)
#define KT_WGMMA_D32 "{" KT_WGMMA_L32 "}"
#define KT_WGMMA_L64 KT_WGMMA_L32 ", " KT_WGMMA_R2 ", " KT_WGMMA_R3
#define KT_WGMMA_OUT64(d) KT_WGMMA_OUT32(d), KT_WGMMA_O2(d), KT_WGMMA_O3(d)
#define KT_WGMMA_D64 "{" KT_WGMMA_L64 "}"
#define KT_WGMMA_L96 KT_WGMMA_L64 ", " KT_WGMMA_R4 ", " KT_WGMMA_R5
#define KT_WGMMA_OUT96(d) KT_WGMMA_OUT64(d), KT_WGMMA_O4(d), KT_WGMMA_O5(d)
#define KT_WGMMA_D96 "{" KT_WGMMA_L96 "}"
#define KT_WGMMA_L128 KT_WGMMA_L96 ", " KT_WGMMA_R6 ", " KT_WGMMA_R7
#define KT_WGMMA_OUT128(d) KT_WGMMA_OUT96(d), KT_WGMMA_O6(d), KT_WGMMA_O7(d)
#define KT_WGMMA_D128 "{" KT_WGMMA_L128 "}"
#define KT_WGMMA_L192 KT_WGMMA_L128 ", " KT_WGMMA_R8 ", " KT_WGMMA_R9 ", " KT_WGMMA_R10 ", " KT_WGMMA_R11
#define KT_WGMMA_OUT192(d) KT_WGMMA_OUT128(d), KT_WGMMA_O8(d), KT_WGMMA_O9(d), KT_WGMMA_O10(d), KT_WGMMA_O11(d)
#define KT_WGMMA_D192 "{" KT_WGMMA_L192 "}"
#define KT_WGMMA_L256 KT_WGMMA_L192 ", " KT_WGMMA_R12 ", " KT_WGMMA_R13 ", " KT_WGMMA_R14 ", " KT_WGMMA_R15
#define KT_WGMMA_OUT256(d) KT_WGMMA_OUT192(d), KT_WGMMA_O12(d), KT_WGMMA_O13(d), KT_WGMMA_O14(d), KT_WGMMA_O15(d)
#define KT_WGMMA_D256 "{" KT_WGMMA_L256 "}"
// The instructions, after D: A's descriptor (or its 4 registers), B's
// descriptor, whether D accumulates, the transposes.
#define KT_WGMMA_SS16(TYPE) \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n16k16.f32." TYPE "." TYPE " " KT_WGMMA_D16 \
  ", %8, %9, p, 1, 1, %11, %12;\n}\n"
#define KT_WGMMA_RS16(TYPE) \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n16k16.f32." TYPE "." TYPE " " KT_WGMMA_D16 \
  ", {%8, %9, %10, %11}, %12, p, 1, 1, %14;\n}\n"
#define KT_WGMMA_SS32(TYPE) \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n32k16.f32." TYPE "." TYPE " " KT_WGMMA_D32 \
  ", %16, %17, p, 1, 1, %19, %20;\n}\n"
#define KT_WGMMA_RS32(TYPE) \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n32k16.f32." TYPE "." TYPE " " KT_WGMMA_D32 \
  ", {%16, %17, %18, %19}, %20, p, 1, 1, %22;\n}\n"
#define KT_WGMMA_SS64(TYPE) \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " " KT_WGMMA_D64 \
  ", %32, %33, p, 1, 1, %35, %36;\n}\n"
#define KT_WGMMA_RS64(TYPE) \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " " KT_WGMMA_D64 \
  ", {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
#define KT_WGMMA_SS96(TYPE) \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %50, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n96k16.f32." TYPE "." TYPE " " KT_WGMMA_D96 \
  ", %48, %49, p, 1, 1, %51, %52;\n}\n"
#define KT_WGMMA_RS96(TYPE) \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %53, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n96k16.f32." TYPE "." TYPE " " KT_WGMMA_D96 \
  ", {%48, %49, %50, %51}, %52, p, 1, 1, %54;\n}\n"
#define KT_WGMMA_SS128(TYPE) \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " " KT_WGMMA_D128 \
  ", %64, %65, p, 1, 1, %67, %68;\n}\n"
#define KT_WGMMA_RS128(TYPE) \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " " KT_WGMMA_D128 \
  ", {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
#define KT_WGMMA_SS192(TYPE) \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n192k16.f32." TYPE "." TYPE " " KT_WGMMA_D192 \
  ", %96, %97, p, 1, 1, %99, %100;\n}\n"
#define KT_WGMMA_RS192(TYPE) \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %101, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n192k16.f32." TYPE "." TYPE " " KT_WGMMA_D192 \
  ", {%96, %97, %98, %99}, %100, p, 1, 1, %102;\n}\n"
#define KT_WGMMA_SS256(TYPE) \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n256k16.f32." TYPE "." TYPE " " KT_WGMMA_D256 \
  ", %128, %129, p, 1, 1, %131, %132;\n}\n"
#define KT_WGMMA_RS256(TYPE) \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n256k16.f32." TYPE "." TYPE " " KT_WGMMA_D256 \
  ", {%128, %129, %130, %131}, %132, p, 1, 1, %134;\n}\n"

namespace kt {

/// The shared-memory address a descriptor holds.
KT_DEVICE unsigned wgmma_address(const void* smem) { return smem_address(smem); }
/// wgmma.fence.sync.aligned: before the first wgmma of a group whose registers were written.
KT_DEVICE void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
/// wgmma.commit_group.sync.aligned: the wgmmas issued since the last commit become one group.
KT_DEVICE void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
/// wgmma.wait_group.sync.aligned N: all but the N most recent committed groups are complete.
template <int N>
KT_DEVICE void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/// fence.proxy.async.shared::cta: this thread's shared-memory writes become visible to wgmma.
KT_DEVICE void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
/// Keeps the compiler from moving uses of D's registers across this point (after a wgmma_wait).
template <int R>
KT_DEVICE void wgmma_fence_operand(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

/// The inputs' type in an instruction's name.
template <class T>
struct WgmmaInputs;
template <>
struct WgmmaInputs<__nv_bfloat16> {
  static constexpr bool bf16 = true;
};
template <>
struct WgmmaInputs<__half> {
  static constexpr bool bf16 = false;
};

#define KT_WGMMA_CASE(N, FORM, ...)                          \
  if constexpr (n == N) {                                    \
    if constexpr (bf16_inputs)                               \
      asm volatile(KT_WGMMA_##FORM##N("bf16") : __VA_ARGS__); \
    else                                                     \
      asm volatile(KT_WGMMA_##FORM##N("f16") : __VA_ARGS__);  \
  }

/// D (64 x N) = A * B (+ D when `accumulate`), A and B from shared memory
/// (descriptors); TRANS_A, TRANS_B: 0 K-major, 1 M/N-major. T: bf16 or f16.
template <int N, class T, int TRANS_A, int TRANS_B>
KT_DEVICE void wgmma_ss(float (&d)[N / 2], unsigned long long a, unsigned long long b, bool accumulate) {
  constexpr int n = N;
  constexpr bool bf16_inputs = WgmmaInputs<T>::bf16;
  static_assert(N == 16 || N == 32 || N == 64 || N == 96 || N == 128 || N == 192 || N == 256,
                "wgmma_ss: N is one of 16, 32, 64, 96, 128, 192, 256");
  const int scale_d = accumulate ? 1 : 0;
  KT_WGMMA_CASE(16, SS, KT_WGMMA_OUT16(d) : "l"(a), "l"(b), "r"(scale_d), "n"(TRANS_A), "n"(TRANS_B))
  KT_WGMMA_CASE(32, SS, KT_WGMMA_OUT32(d) : "l"(a), "l"(b), "r"(scale_d), "n"(TRANS_A), "n"(TRANS_B))
  KT_WGMMA_CASE(64, SS, KT_WGMMA_OUT64(d) : "l"(a), "l"(b), "r"(scale_d), "n"(TRANS_A), "n"(TRANS_B))
  KT_WGMMA_CASE(96, SS, KT_WGMMA_OUT96(d) : "l"(a), "l"(b), "r"(scale_d), "n"(TRANS_A), "n"(TRANS_B))
  KT_WGMMA_CASE(128, SS, KT_WGMMA_OUT128(d) : "l"(a), "l"(b), "r"(scale_d), "n"(TRANS_A), "n"(TRANS_B))
  KT_WGMMA_CASE(192, SS, KT_WGMMA_OUT192(d) : "l"(a), "l"(b), "r"(scale_d), "n"(TRANS_A), "n"(TRANS_B))
  KT_WGMMA_CASE(256, SS, KT_WGMMA_OUT256(d) : "l"(a), "l"(b), "r"(scale_d), "n"(TRANS_A), "n"(TRANS_B))
}

/// As wgmma_ss with A from registers: this warp's 16 rows of A in
/// mma.m16n8k16's A fragment ({row g, g + 8} x {k 2t.., 2t + 8..}, row half first).
template <int N, class T, int TRANS_B>
KT_DEVICE void wgmma_rs(float (&d)[N / 2], const unsigned (&a)[4], unsigned long long b, bool accumulate) {
  constexpr int n = N;
  constexpr bool bf16_inputs = WgmmaInputs<T>::bf16;
  static_assert(N == 16 || N == 32 || N == 64 || N == 96 || N == 128 || N == 192 || N == 256,
                "wgmma_rs: N is one of 16, 32, 64, 96, 128, 192, 256");
  const int scale_d = accumulate ? 1 : 0;
#define KT_WGMMA_RS_IN "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(scale_d), "n"(TRANS_B)
  KT_WGMMA_CASE(16, RS, KT_WGMMA_OUT16(d) : KT_WGMMA_RS_IN)
  KT_WGMMA_CASE(32, RS, KT_WGMMA_OUT32(d) : KT_WGMMA_RS_IN)
  KT_WGMMA_CASE(64, RS, KT_WGMMA_OUT64(d) : KT_WGMMA_RS_IN)
  KT_WGMMA_CASE(96, RS, KT_WGMMA_OUT96(d) : KT_WGMMA_RS_IN)
  KT_WGMMA_CASE(128, RS, KT_WGMMA_OUT128(d) : KT_WGMMA_RS_IN)
  KT_WGMMA_CASE(192, RS, KT_WGMMA_OUT192(d) : KT_WGMMA_RS_IN)
  KT_WGMMA_CASE(256, RS, KT_WGMMA_OUT256(d) : KT_WGMMA_RS_IN)
#undef KT_WGMMA_RS_IN
}
#undef KT_WGMMA_CASE

}  // namespace kt
#endif  // KT_EMULATION

// ---- both backends ------------------------------------------------------------------

namespace kt {

/// Shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format") of
/// an operand starting at `smem`: `swizzle` 0 none, 1 128-byte, 2 64-byte,
/// 3 32-byte; `lbo`, `sbo` in bytes (multiples of 16); the base offset is 0.
KT_DEVICE unsigned long long wgmma_desc(const void* smem, unsigned swizzle, unsigned lbo, unsigned sbo) {
  return static_cast<unsigned long long>(wgmma_address(smem) >> 4 & 0x3fffu) |
         static_cast<unsigned long long>(lbo >> 4 & 0x3fffu) << 16 |
         static_cast<unsigned long long>(sbo >> 4 & 0x3fffu) << 32 |
         static_cast<unsigned long long>(swizzle & 3u) << 62;
}

}  // namespace kt
