// Row sums y[r] = sum_c x[r][c] in fp32 (x: rows x cols, row-major): the
// example of a kernel spec with warp shuffles and shared memory
// (reduction.json). One block per row.

// Each thread sums a strided part of its row, VEC consecutive values at a
// time; warps reduce with shuffles, warp 0's lane 0 adds the warps' partials.
//   THREADS: threads per row; more loads in flight, more idle threads on short rows
//   VEC:     consecutive values per step; fewer loop iterations, cols must be a multiple
template <int THREADS, int VEC>
__global__ void row_sum(const float* x, float* y, int cols) {
  static_assert(THREADS % 32 == 0, "the block is whole warps");
  __shared__ float partial[THREADS / 32];
  const float* row = x + static_cast<long long>(blockIdx.x) * cols;
  float s = 0.0f;
  for (int c = threadIdx.x * VEC; c < cols; c += THREADS * VEC)
    for (int v = 0; v < VEC; ++v) s += row[c + v];
  for (int offset = 16; offset > 0; offset >>= 1) s += __shfl_down_sync(0xffffffffu, s, offset);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f;
    for (int w = 0; w < THREADS / 32; ++w) total += partial[w];
    y[blockIdx.x] = total;
  }
}
