// Pieces the attention kernels share (attention.cuh, the forward;
// attention_bwd.cuh, the backward): tensor strides, the shared-memory tile
// layouts (padded rows or XOR-swizzled chunks), the warp's matrix product per
// element type, the cp.async tile copy that lays rows out by a layout, its
// pipeline's head, and an accumulator tile made the A fragment of a product.
#pragma once
#include "common/kt.cuh"

namespace attention {

/// Element strides of a tensor indexed (batch, seq, head, d) with d
/// contiguous; the host packs ktune::templates::attention::TensorStrides,
/// the same three 64-bit fields in the same order.
struct Strides {
  long long batch;
  long long head;
  long long seq;
};

/// Where element (row, col) of a tile of WIDTH-element rows (HEAD_DIM for
/// Q, K, V and dO; the backward's dS^T is BLOCK_M wide) of CHUNK-element
/// 16-byte chunks (8 16-bit values or 4 floats) lives in shared memory. An
/// ldmatrix reads one chunk from each of 8 consecutive rows (the fp32 path
/// reads 4 consecutive elements of 8 rows, or 8 of 4 row pairs): the layouts
/// keep those reads in distinct banks.
///   LAYOUT 0 (padded): rows ROW = WIDTH + CHUNK elements apart, a spare
///     chunk after each row, which shifts successive rows by 4 banks.
///   LAYOUT 1 (swizzled): rows packed; chunk c of row r stored at chunk
///     c ^ (r % SWIZZLE), SWIZZLE the largest power of two <= 8 dividing the
///     chunks of a row (ldmatrix is conflict-free when a row is a multiple of
///     128 bytes: WIDTH a multiple of 64 16-bit values or 32 floats).
template <int WIDTH, int LAYOUT, int CHUNK>
struct TileLayout {
  static_assert(LAYOUT == 0 || LAYOUT == 1, "a tile layout is 0 (padded rows) or 1 (XOR-swizzled chunks)");
  static_assert(WIDTH % CHUNK == 0, "rows are whole 16-byte chunks");
  static constexpr int CHUNKS = WIDTH / CHUNK;  // 16-byte chunks per row
  static constexpr int ROW = LAYOUT == 0 ? WIDTH + CHUNK : WIDTH;
  static constexpr int SWIZZLE = LAYOUT == 0           ? 1
                                 : CHUNKS % 8 == 0 ? 8
                                 : CHUNKS % 4 == 0 ? 4
                                 : CHUNKS % 2 == 0 ? 2
                                                   : 1;
  KT_DEVICE static int offset(int row, int col) {
    if constexpr (SWIZZLE == 1)
      return row * ROW + col;  // spelled out: ptxas keeps the chunk arithmetic below for signed columns
    else
      return row * ROW + ((col / CHUNK) ^ (row & (SWIZZLE - 1))) * CHUNK + col % CHUNK;
  }
  /// offset(rows + row, col) for `rows` a multiple of 8 (of the swizzle's
  /// period), whose part is added apart: the lane's part of a fragment's
  /// address is then computed once and a loop's tiles are constant offsets
  /// from it, where ptxas would otherwise fold the tile into the lane's row
  /// (by an OR) and compute every tile's address anew.
  KT_DEVICE static int offset(int rows, int row, int col) { return rows * ROW + offset(row, col); }
};

/// The warp's matrix product with fp32 accumulation for the element type T:
/// m16n8k16 for 16-bit types, m16n8k8 in tf32 for float (K is the k of one call).
template <class T>
struct Mma;
template <>
struct Mma<kt::bf16> {
  static constexpr int K = 16;
  KT_DEVICE static void run(float d[4], const unsigned a[4], const unsigned b[2]) {
    kt::mma_m16n8k16_bf16(d, a, b, d);
  }
};
template <>
struct Mma<kt::f16> {
  static constexpr int K = 16;
  KT_DEVICE static void run(float d[4], const unsigned a[4], const unsigned b[2]) {
    kt::mma_m16n8k16_f16(d, a, b, d);
  }
};
template <>
struct Mma<float> {
  static constexpr int K = 8;
  KT_DEVICE static void run(float d[4], const unsigned a[4], const unsigned b[2]) {
    kt::mma_m16n8k8_tf32(d, a, b, d);
  }
};

/// Two adjacent elements, stored as one 4-byte access.
template <class T>
struct alignas(2 * sizeof(T)) Pair {
  T lo, hi;
};

/// Starts the copy of rows [row0, row0 + ROWS) of a (seq, HEAD_DIM) matrix
/// whose rows are `row_stride` elements apart into the tile `dst`; rows at or
/// past `seq` are zero-filled (a zero V row adds nothing even where P is 0,
/// where a stray NaN would). Completes at the covering cp_async_wait.
/// When the block's threads cover whole rows and the rows a thread copies
/// are whole swizzle periods apart, every copy of a thread has the same
/// column and the same swizzle: its source walks by one stride and its
/// destination by a constant, instead of an address per copy that ptxas
/// would compute once and hold in registers for the whole kernel.
template <int ROWS, int HEAD_DIM, int LAYOUT, int THREADS, class T>
KT_DEVICE void load_tile(T* dst, const T* src, long long row_stride, int row0, int seq) {
  constexpr int CHUNK = 16 / static_cast<int>(sizeof(T));
  constexpr int CHUNKS = HEAD_DIM / CHUNK;
  constexpr int ITERS = (ROWS * CHUNKS + THREADS - 1) / THREADS;
  using Layout = TileLayout<HEAD_DIM, LAYOUT, CHUNK>;
  constexpr int STEP = THREADS / CHUNKS;  // rows between a thread's copies, when whole rows
  if constexpr (THREADS % CHUNKS == 0 && STEP % Layout::SWIZZLE == 0 && ROWS % STEP == 0) {
    const int r = static_cast<int>(threadIdx.x) / CHUNKS, col = static_cast<int>(threadIdx.x) % CHUNKS * CHUNK;
    T* to = dst + Layout::offset(r, col);
    const T* from = src + (row0 + r) * row_stride + col;
#pragma unroll
    for (int it = 0; it < ITERS; ++it) {
      const bool inside = row0 + r + it * STEP < seq;  // else read nothing (from row 0, which exists: seq >= 1)
      kt::cp_async_16_zfill(to + it * STEP * Layout::ROW, inside ? from : src, inside ? 16 : 0);
      from += STEP * row_stride;
    }
  } else {
#pragma unroll
    for (int it = 0; it < ITERS; ++it) {
      const int c = it * THREADS + static_cast<int>(threadIdx.x);
      if (ROWS * CHUNKS % THREADS == 0 || c < ROWS * CHUNKS) {
        const int r = c / CHUNKS, col = c % CHUNKS * CHUNK;
        T* to = dst + Layout::offset(r, col);
        // A copy and a zero-fill apart: one copy of a selected source had ptxas hold a 64-bit source per
        // copy, and blocks of 1 or 2 warps, where a thread makes up to 64 copies, spilled.
        if (row0 + r < seq)
          kt::cp_async_16(to, src + (row0 + r) * row_stride + col);
        else
          kt::cp_async_16_zfill(to, src, 0);  // reads nothing; row 0 exists (seq >= 1)
      }
    }
  }
}

/// The head of iteration `it` (of `count`) of a walk whose tiles arrive by
/// cp.async, STAGES iterations' tiles in flight, the first STAGES - 1
/// committed (one group each) before the walk: waits for iteration it's
/// group, then one barrier, after which every thread sees those tiles and
/// every warp is done with iteration it - 1, whose stage `load(i)` then
/// refills for iteration i = it + STAGES - 1 (one group, empty past the
/// end). So the walk needs no barrier at its iterations' ends. With one
/// stage the load waits for that barrier and a second one follows it.
template <int STAGES, class Load>
KT_DEVICE void pipeline_head(int it, int count, Load&& load) {
  if constexpr (STAGES == 1) {
    __syncthreads();
    load(it);
    kt::cp_async_commit();
    kt::cp_async_wait<0>();
    __syncthreads();
  } else {
    kt::cp_async_wait<STAGES - 2>();
    __syncthreads();
    if (it + STAGES - 1 < count) load(it + STAGES - 1);
    kt::cp_async_commit();
  }
}

/// The A fragment of k step `step` made from an m16 x n accumulator tile
/// (n8 tiles c[.]): its columns become the k of the next product. 16-bit:
/// n8 tiles 2 step and 2 step + 1 rounded to T; tf32: n8 tile `step`, k = t
/// and t + 4 taking columns 2t and 2t + 1 (the B side loads PERMUTED).
template <class T, int N>
KT_DEVICE void acc_to_a(unsigned a[4], const float (&c)[N][4], int step) {
  if constexpr (sizeof(T) == 4) {
    a[0] = kt::float_to_tf32(c[step][0]);
    a[1] = kt::float_to_tf32(c[step][2]);
    a[2] = kt::float_to_tf32(c[step][1]);
    a[3] = kt::float_to_tf32(c[step][3]);
  } else {
    a[0] = kt::pack2(kt::from_float<T>(c[2 * step][0]), kt::from_float<T>(c[2 * step][1]));
    a[1] = kt::pack2(kt::from_float<T>(c[2 * step][2]), kt::from_float<T>(c[2 * step][3]));
    a[2] = kt::pack2(kt::from_float<T>(c[2 * step + 1][0]), kt::from_float<T>(c[2 * step + 1][1]));
    a[3] = kt::pack2(kt::from_float<T>(c[2 * step + 1][2]), kt::from_float<T>(c[2 * step + 1][3]));
  }
}

/// The tile a block works on, as its rank (0: the tile with the most work
/// under a causal mask: the forward's and the dQ pass's last query block,
/// the dK/dV pass's first key block), and its head and batch. The GPU starts
/// a grid's blocks in the order of their linear index, x fastest.
///   tile_order 0: the grid as launched, x the rank: each head's tiles start
///     together, its longest first.
///   tile_order 1: the linear index walks the (head, batch) pairs fastest and
///     the ranks slowest: the longest tiles of every head start first and the
///     shortest fill the end (longest processing time first), so under a
///     causal mask the last head's longest tile does not start near the end
///     of the grid and run on after the rest.
/// Without a causal mask (CAUSAL false) every tile has the same work, the
/// families admit tile_order 0 alone, and the kernels keep no code for 1.
struct BlockTile {
  int rank, head, batch;
};
template <bool CAUSAL>
KT_DEVICE BlockTile block_tile(int tile_order) {
  if (!CAUSAL || tile_order == 0)
    return {static_cast<int>(blockIdx.x), static_cast<int>(blockIdx.y), static_cast<int>(blockIdx.z)};
  const long long pairs = static_cast<long long>(gridDim.y) * gridDim.z;
  const long long linear =
      blockIdx.x + static_cast<long long>(gridDim.x) * (blockIdx.y + static_cast<long long>(gridDim.y) * blockIdx.z);
  const int pair = static_cast<int>(linear % pairs);
  return {static_cast<int>(linear / pairs), pair % static_cast<int>(gridDim.y), pair / static_cast<int>(gridDim.y)};
}

/// Two warpgroups of a block issuing their products in turns (ON; the
/// families' `pingpong`, FlashAttention-3's ping-pong), so the products of
/// one run beside the other's softmax instead of both warpgroups' products
/// together: warpgroup w waits at named barrier 1 + w for its turn (mine),
/// and once its products are issued lets the other go at that one's barrier
/// (yours; 256 threads a barrier: 128 waiting, 128 arriving). start() lets
/// warpgroup 0 go first; after its last products warpgroup 1 lets no one go,
/// so every arrival meets its wait. Off, every call is nothing.
template <bool ON>
struct Turns {
  int group;  // the calling thread's warpgroup, 0 or 1

  KT_DEVICE void start() const {
    if constexpr (ON)
      if (group == 1) kt::named_barrier_arrive<1, 256>();
  }
  KT_DEVICE void mine() const {
    if constexpr (ON) {
      if (group == 0)
        kt::named_barrier_sync<1, 256>();
      else
        kt::named_barrier_sync<2, 256>();
    }
  }
  KT_DEVICE void yours(bool last) const {
    if constexpr (ON) {
      if (group == 0)
        kt::named_barrier_arrive<2, 256>();
      else if (!last)
        kt::named_barrier_arrive<1, 256>();
    }
  }
};

}  // namespace attention
