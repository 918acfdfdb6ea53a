// Tiled matrix multiply C = A B in fp32, row-major (A: m x k, B: k x n,
// C: m x n): the example of a kernel spec with shared memory and
// restrictions (matmul.json). Plain CUDA C++: it runs on the GPU through
// NVRTC and on the CPU through ktune's emulation.

// Tiles of A and B staged in shared memory; each thread of a TILE x
// (TILE / WPT) block computes WPT outputs of one column.
//   TILE: tile edge; larger tiles reuse each load more, but need more shared memory
//   WPT:  outputs per thread; more work per thread, fewer threads per block
template <int TILE, int WPT>
__global__ void matmul_tiled(const float* A, const float* B, float* C, int m, int n, int k) {
  static_assert(TILE % WPT == 0, "a thread's outputs split the tile's rows evenly");
  constexpr int ROWS = TILE / WPT;  // threads along y
  __shared__ float As[TILE][TILE];
  __shared__ float Bs[TILE][TILE];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int col = blockIdx.x * TILE + tx;
  const int row0 = blockIdx.y * TILE + ty;
  float acc[WPT];
  for (int w = 0; w < WPT; ++w) acc[w] = 0.0f;
  for (int t = 0; t < k; t += TILE) {  // the spec's restrictions make m, n, k multiples of TILE
    for (int w = 0; w < WPT; ++w) {
      As[ty + w * ROWS][tx] = A[(row0 + w * ROWS) * k + t + tx];
      Bs[ty + w * ROWS][tx] = B[(t + ty + w * ROWS) * n + col];
    }
    __syncthreads();
    for (int i = 0; i < TILE; ++i)
      for (int w = 0; w < WPT; ++w) acc[w] += As[ty + w * ROWS][i] * Bs[i][tx];
    __syncthreads();
  }
  for (int w = 0; w < WPT; ++w) C[(row0 + w * ROWS) * n + col] = acc[w];
}

// The reference: one output per thread, straight from global memory.
__global__ void matmul_naive(const float* A, const float* B, float* C, int m, int n, int k) {
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= m || col >= n) return;
  float acc = 0.0f;
  for (int i = 0; i < k; ++i) acc += A[row * k + i] * B[i * n + col];
  C[row * n + col] = acc;
}
