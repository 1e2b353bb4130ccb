// Idioms of public learners' code that the emulator must take as nvcc does: launches
// and inline PTX inside macros written over several lines, a launch whose kernel name a
// macro pastes together, overloaded kernels, template kernels whose arguments a launch
// deduces, a NULL argument, `static __shared__`. Each check prints one line: "name ok"
// or what it got.
#include <cstdio>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cooperative_groups.h>
#include <cooperative_groups/scan.h>
namespace cg = cooperative_groups;

#define CHECK(call)                                                         \
  do {                                                                      \
    cudaError_t e = (call);                                                 \
    if (e != cudaSuccess) {                                                 \
      std::printf("%s failed: %s\n", #call, cudaGetErrorString(e));        \
      return 1;                                                             \
    }                                                                       \
  } while (0)

// A launch written over three macro lines.
#define LAUNCH_FILL(kernel, n, out, value) \
  kernel<<<((n) + 127) / 128,              \
           128>>>(out, n, value)

// ldmatrix and a 16-byte cp.async through macros, their operand lists split over lines.
#define LDMATRIX_X1(r, addr)                                           \
  asm volatile("ldmatrix.sync.aligned.x1.m8n8.shared.b16 {%0}, [%1];\n" \
               : "=r"(r)                                               \
               : "r"(addr))
#define CP_ASYNC_16(dst, src)                                        \
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), \
               "l"(src))
#define CP_ASYNC_WAIT_ALL() asm volatile("cp.async.wait_all;\n" ::)
// The kernel's name pasted from the macro's argument, which is named t (as the
// emulator's own launch code names things: they must not collide).
#define LAUNCH_ADD(t, x, n) add_##t##_kernel<<<((n) + 127) / 128, 128>>>(x, n)

__global__ void fill(float* out, int n, float value) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = value;
}

// Overloads: the launch's arguments choose, as in a call.
__global__ void scale(float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= 2.f;
}
__global__ void scale(float* x, int n, float by) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= by;
}
__global__ void scale(int* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= 3;
}

__global__ void add_f32_kernel(float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.f;
}

// `static __shared__`: in a kernel, the same as __shared__. Reverses each 128-element
// piece of x.
__global__ void reverse_tiles(float* x, int n) {
  static __shared__ float tile[128];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  tile[threadIdx.x] = i < n ? x[i] : 0.f;
  __syncthreads();
  if (i < n) x[i] = tile[127 - threadIdx.x];
}

// A template whose parameter the launch deduces.
template <class T>
__global__ void add_one(T* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] + T(1);
}

// A NULL argument: the kernel skips what it is not given.
__global__ void maybe_bias(float* out, const float* bias, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] += bias ? bias[i] : 0.5f;
}

// Atomics take a value of another type, converted to the pointer's (an int added to an
// unsigned counter, a double to a float).
__global__ void count(unsigned* counter, float* sum) {
  atomicAdd(counter, 1);
  atomicAdd(sum, 0.5);
}

// Each warp's ranks, scanned: inclusive (rank + 1) and exclusive (rank) sums of ones.
__global__ void ranks(int* inclusive, int* exclusive) {
  auto warp = cg::tiled_partition<32>(cg::this_thread_block());
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  inclusive[i] = cg::inclusive_scan(warp, 1);
  exclusive[i] = cg::exclusive_scan(warp, 1, cg::plus<int>());
}

// Copies 8 rows of 16 bytes with cp.async, then each lane reads one 32-bit word of
// the 8x8 matrix through ldmatrix: lane l holds row l / 4, columns 2 (l % 4) and +1.
__global__ void tile_words(const unsigned short* in, unsigned* out) {
  __shared__ alignas(16) unsigned short tile[8 * 8];
  const int lane = threadIdx.x;
  const unsigned base = static_cast<unsigned>(__cvta_generic_to_shared(tile));
  if (lane < 8) CP_ASYNC_16(base + 16 * lane, in + 8 * lane);
  CP_ASYNC_WAIT_ALL();
  __syncthreads();
  unsigned r;
  LDMATRIX_X1(r, base + 16 * (lane % 8));
  out[lane] = r;
}

template <class T>
bool all_equal(const T* d, int n, T want, const char* name) {
  T* h = new T[n];
  cudaMemcpy(h, d, n * sizeof(T), cudaMemcpyDeviceToHost);
  bool ok = true;
  for (int i = 0; i < n; ++i) ok = ok && h[i] == want;
  std::printf("%s %s\n", name, ok ? "ok" : "wrong");
  delete[] h;
  return ok;
}

int main() {
  const int n = 300;
  float* f;
  int* k;
  double* g;
  CHECK(cudaMalloc(&f, n * sizeof(float)));
  CHECK(cudaMalloc(&k, n * sizeof(int)));
  CHECK(cudaMalloc(&g, n * sizeof(double)));

  LAUNCH_FILL(fill, n, f, 1.5f);
  CHECK(cudaDeviceSynchronize());
  all_equal(f, n, 1.5f, "macro_launch");

  scale<<<3, 128>>>(f, n);             // (float*, int): doubles
  scale<<<3, 128>>>(f, n, 4.f);        // (float*, int, float)
  CHECK(cudaMemset(k, 0, n * sizeof(int)));
  add_one<<<3, 128>>>(k, n);           // add_one<int>
  scale<<<3, 128>>>(k, n);             // (int*, int): triples
  CHECK(cudaDeviceSynchronize());
  all_equal(f, n, 12.f, "overload");
  all_equal(k, n, 3, "overload_int");

  CHECK(cudaMemset(g, 0, n * sizeof(double)));
  add_one<<<3, 128>>>(g, n);           // add_one<double>
  add_one<float><<<3, 128>>>(f, n);    // arguments given
  CHECK(cudaDeviceSynchronize());
  all_equal(g, n, 1.0, "deduced");
  all_equal(f, n, 13.f, "explicit");

  maybe_bias<<<3, 128>>>(f, NULL, n);
  CHECK(cudaDeviceSynchronize());
  all_equal(f, n, 13.5f, "null_argument");

  LAUNCH_ADD(f32, f, n);
  CHECK(cudaDeviceSynchronize());
  all_equal(f, n, 14.5f, "pasted_name");

  float ramp[128];
  for (int i = 0; i < 128; ++i) ramp[i] = float(i);
  CHECK(cudaMemcpy(f, ramp, sizeof ramp, cudaMemcpyHostToDevice));
  reverse_tiles<<<1, 128>>>(f, 128);
  CHECK(cudaMemcpy(ramp, f, sizeof ramp, cudaMemcpyDeviceToHost));
  bool reversed = true;
  for (int i = 0; i < 128; ++i) reversed = reversed && ramp[i] == float(127 - i);
  std::printf("static_shared %s\n", reversed ? "ok" : "wrong");

  unsigned* counter;
  CHECK(cudaMalloc(&counter, sizeof(unsigned)));
  CHECK(cudaMemset(counter, 0, sizeof(unsigned)));
  CHECK(cudaMemset(f, 0, sizeof(float)));
  count<<<2, 64>>>(counter, f);
  CHECK(cudaDeviceSynchronize());
  all_equal(counter, 1, 128u, "atomic_conversion");
  all_equal(f, 1, 64.f, "atomic_float");

  int *inclusive, *exclusive, h_inc[64], h_exc[64];
  CHECK(cudaMalloc(&inclusive, sizeof h_inc));
  CHECK(cudaMalloc(&exclusive, sizeof h_exc));
  ranks<<<1, 64>>>(inclusive, exclusive);
  CHECK(cudaMemcpy(h_inc, inclusive, sizeof h_inc, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(h_exc, exclusive, sizeof h_exc, cudaMemcpyDeviceToHost));
  bool scanned = true;
  for (int i = 0; i < 64; ++i)
    scanned = scanned && h_inc[i] == i % 32 + 1 && h_exc[i] == i % 32;
  std::printf("scan %s\n", scanned ? "ok" : "wrong");

  unsigned short h_in[64];
  for (int i = 0; i < 64; ++i) h_in[i] = static_cast<unsigned short>(i);
  unsigned short* in;
  unsigned* out;
  CHECK(cudaMalloc(&in, sizeof h_in));
  CHECK(cudaMalloc(&out, 32 * sizeof(unsigned)));
  CHECK(cudaMemcpy(in, h_in, sizeof h_in, cudaMemcpyHostToDevice));
  tile_words<<<1, 32>>>(in, out);
  unsigned h_out[32];
  CHECK(cudaMemcpy(h_out, out, sizeof h_out, cudaMemcpyDeviceToHost));
  bool ok = true;
  for (int l = 0; l < 32; ++l) {
    const unsigned lo = 8 * (l / 4) + 2 * (l % 4);
    ok = ok && h_out[l] == (lo | (lo + 1) << 16);
  }
  std::printf("macro_asm %s\n", ok ? "ok" : "wrong");
  return 0;
}
