// z = x + y in fp32, VEC elements per thread: the smallest kernel spec
// (vector_add.json).
template <int VEC>
__global__ void vector_add(const float* x, const float* y, float* z, int n) {
  const int i = (blockIdx.x * blockDim.x + threadIdx.x) * VEC;
  for (int v = 0; v < VEC; ++v)
    if (i + v < n) z[i + v] = x[i + v] + y[i + v];
}
