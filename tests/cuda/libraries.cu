// What kernels found online take from CUDA's libraries without calling them: libcu++'s
// cuda::std and cuda::memcpy_async into shared memory through a cuda::barrier, cuBLAS's
// and cuBLASLt's types through their headers. nvcc compiles this file as it is (the
// cuBLAS part where the toolkit has cuBLAS); so does the emulator
// (tests/test_foreign.py).
#include <cuda/barrier>
#include <cuda/std/limits>
#include <cuda/std/type_traits>

static_assert(cuda::std::is_same_v<cuda::std::remove_cv_t<const float>, float>);

// out[b] = the largest of x[b * 256 ... b * 256 + 255] (of nothing: -inf's stand-in,
// the lowest float), staged in shared memory by one thread's asynchronous copy.
__global__ void block_max(const float* x, float* out) {
  __shared__ alignas(16) float tile[256];
  __shared__ cuda::barrier<cuda::thread_scope_block> bar;
  if (threadIdx.x == 0) init(&bar, blockDim.x);
  __syncthreads();
  if (threadIdx.x == 0)
    cuda::memcpy_async(tile, x + blockIdx.x * 256,
                       cuda::aligned_size_t<16>(256 * sizeof(float)), bar);
  bar.arrive_and_wait();
  if (threadIdx.x == 0) {
    float m = cuda::std::numeric_limits<float>::lowest();
    for (int i = 0; i < 256; ++i) m = fmaxf(m, tile[i]);
    out[blockIdx.x] = m;
  }
}

#if __has_include(<cublasLt.h>)
#include <cublasLt.h>
#include <cublas_v2.h>

// The values the toolkit gives its constants, and a handle made and dropped.
int library_types(int which) {
  cublasLtHandle_t lt;
  cublasLtCreate(&lt);
  cublasLtDestroy(lt);
  cublasLtMatmulHeuristicResult_t result{};
  return which == 0 ? int(CUDA_R_32F) : which == 1 ? int(CUBLAS_COMPUTE_32F)
         : which == 2 ? int(CUBLASLT_EPILOGUE_GELU_BIAS) : int(result.workspaceSize);
}
#endif

void launch_block_max(const float* x, float* out, int blocks) {
  block_max<<<blocks, 64>>>(x, out);
}
