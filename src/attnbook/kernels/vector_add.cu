// c = a + b, the first kernel of the book, in two forms.

// One thread per element: the grid must cover n, and threads past the end do nothing.
__global__ void vector_add_kernel(const float* __restrict__ a,
                                  const float* __restrict__ b,
                                  float* __restrict__ c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

// Grid-stride loop: any grid size covers any n, so the launch can size the grid to the
// GPU rather than to the data. Consecutive threads touch consecutive addresses
// (coalesced).
__global__ void vector_add_grid_stride_kernel(const float* __restrict__ a,
                                              const float* __restrict__ b,
                                              float* __restrict__ c, int n) {
  const int step = gridDim.x * blockDim.x;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step)
    c[i] = a[i] + b[i];
}

void vector_add(const float* a, const float* b, float* c, int n, bool grid_stride,
                cudaStream_t stream) {
  const int threads = 256;
  if (grid_stride) {
    vector_add_grid_stride_kernel<<<32, threads, 0, stream>>>(a, b, c, n);
  } else {
    vector_add_kernel<<<(n + threads - 1) / threads, threads, 0, stream>>>(a, b, c, n);
  }
}
