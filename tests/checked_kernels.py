"""Kernels with planted bugs, clean ones, and the profile's textbook cases, shared by
test_memcheck, test_racecheck and test_profile (one extension: one plain and one
checked build). A comment ``// @name`` marks the line a test expects a report on."""
import functools

import attnbook as ab

SOURCE = r"""
#include <cuda_pipeline.h>

// ---- memcheck ----
__global__ void write_past_end(float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i <= n) out[i] = 1.f;  // @past-end
}
__global__ void read_before_start(const float* x, float* out, int n) {
  int i = threadIdx.x;
  out[i] = x[i - 1];  // @before-start
}
// Asks for one float of dynamic shared memory less than it uses.
__global__ void dynamic_overrun(float* out, int n) {
  extern __shared__ float buf[];
  buf[threadIdx.x] = 1.f;  // @dynamic
  __syncthreads();
  out[threadIdx.x] = buf[0];
}
// 33 threads, 32 floats.
__global__ void static_overrun(float* out, int n) {
  __shared__ float tile[32];
  tile[threadIdx.x] = float(threadIdx.x);  // @static
  __syncthreads();
  out[threadIdx.x] = tile[threadIdx.x % 32];
}
// Thread 0 writes element n of a 32-float static array, or of the dynamic shared
// memory.
__global__ void static_at(float* out, int n) {
  __shared__ float tile[32];
  if (threadIdx.x == 0) tile[n] = 1.f;  // @static-at
  __syncthreads();
  out[threadIdx.x] = tile[threadIdx.x % 32];
}
__global__ void dynamic_at(float* out, int n) {
  extern __shared__ float buf[];
  if (threadIdx.x == 0) buf[n] = 1.f;  // @dynamic-at
  __syncthreads();
  out[threadIdx.x] = buf[0];
}
__global__ void atomic_past_end(float* out, int n) {
  atomicAdd(&out[n], 1.f);  // @atomic
}
// Thread 0 hands the others the address of one of its locals.
__global__ void foreign_local(const float* x, float* out, int n) {
  __shared__ const float* where;
  float mine[2] = {x[threadIdx.x], 0.f};
  if (threadIdx.x == 0) where = mine;
  __syncthreads();
  out[threadIdx.x] = where[0];  // @foreign
  __syncthreads();
}
// Thread 5 writes element n of its own local array of 8, through a pointer (a local
// whose address escapes is checked).
__device__ __noinline__ void put(float* a, int i) {
  a[i] = 1.f;  // @local-past
}
__global__ void local_past_end(const float* x, float* out, int n) {
  float mine[8] = {};
  if (threadIdx.x == 5) put(mine, n);
  out[threadIdx.x] = mine[threadIdx.x % 8];
}
// Every thread stores 1 in one flag (write-after-write, one value), then reads its
// neighbour's element with no barrier since the neighbour wrote it: the hazard that
// matters.
__global__ void flag_then_neighbour(const float* x, float* out, int n) {
  __shared__ int flag;
  __shared__ float s[64];
  flag = 1;  // @flag
  s[threadIdx.x] = x[threadIdx.x];  // @neighbour-write
  out[threadIdx.x] = s[(threadIdx.x + 1) % blockDim.x];  // @neighbour-read
}
// Each thread copies 4 floats of x to the tile with cp.async; the bound lets one thread
// past the end of x.
__global__ void async_past_end(const float* x, float* out, int n) {
  __shared__ float4 tile[32];
  int t = threadIdx.x;
  if (4 * t <= n) __pipeline_memcpy_async(&tile[t], &x[4 * t], 16);  // @async-end
  __pipeline_commit();
  __pipeline_wait_prior(0);
  __syncthreads();
  out[t] = tile[t].x;
}

// ---- clean: block sums through dynamic shared memory, a warp reduction, atomics, a
// __constant__ ----
__constant__ float kOne[1] = {1.f};
__global__ void block_sum(const float* x, float* out, int n) {
  extern __shared__ float part[];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v = i < n ? x[i] : 0.f;
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.f;
    for (int w = 0; w < blockDim.x / 32; ++w) s += part[w];
    atomicAdd(out, s * kOne[0]);
  }
}
// Within one warp, __syncwarp and a shuffle order the accesses: no hazard.
__global__ void warp_ordered(const float* x, float* out, int n) {
  __shared__ float s[32];
  int t = threadIdx.x;
  s[t] = x[t];
  __syncwarp();
  float v = s[(t + 1) % 32];
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  s[t] = v;
  __syncwarp();
  out[t] = s[(t + 1) % 32];
}

// ---- racecheck ----
__global__ void shared_counter(const float* x, float* out, int n) {
  __shared__ int counter;
  if (threadIdx.x == 0) counter = 0;
  __syncthreads();
  counter += 1;  // @counter
  __syncthreads();
  if (threadIdx.x == 0) out[0] = float(counter);
}
// 64 threads: each reads the other warp's element, then overwrites its own with no
// barrier between. The shuffles hold every lane of a warp until all have read, so
// every thread order reads before any write: only racecheck sees it.
__global__ void hidden_war(const float* x, float* out, int n) {
  __shared__ float s[64];
  int t = threadIdx.x;
  s[t] = x[t];
  __syncthreads();
  float v = s[(t + 32) % 64];  // @war-read
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  s[t] = v;  // @war-write
  __syncthreads();
  out[t] = s[t];
}
// Each lane's copy lands in its own word, which its neighbour reads after waiting for
// its own copy only: without the barrier (barrier = 0) nothing orders the two.
__global__ void async_shift(const float* x, float* out, int barrier) {
  __shared__ float tile[32];
  int t = threadIdx.x;
  __pipeline_memcpy_async(&tile[t], &x[t], 4);  // @async-copy
  __pipeline_commit();
  __pipeline_wait_prior(0);
  if (barrier) __syncthreads();
  out[t] = tile[(t + 1) % 32];  // @async-read
}

// 16-bit elements: threads 2w and 2w + 1 write the two halves of word w, then thread
// t + 32 reads thread t's element with no barrier between.
__global__ void half_race(const float* x, float* out, int n) {
  __shared__ unsigned short h[32];
  int t = threadIdx.x;
  if (t < 32) h[t] = (unsigned short)t;  // @half-write
  else out[t] = h[t - 32];  // @half-read
}

// ---- profile: one warp ----
__global__ void strided_load(const float* x, float* out, int stride) {
  out[threadIdx.x] = x[threadIdx.x * stride];  // @strided
}
// A 32x32 float tile in rows of `pitch` floats (32, or 33: padded); swizzled: element
// (r, c) at column c ^ r. Written by rows, then each lane reads its row's element of
// column c, for every c: a column read.
__global__ void tile_columns(const float* x, float* out, int layout) {
  extern __shared__ float tile[];
  int lane = threadIdx.x, pitch = layout == 1 ? 33 : 32, swz = layout == 2;
  for (int r = 0; r < 32; ++r) tile[r * pitch + (swz ? lane ^ r : lane)] = x[lane];
  __syncthreads();  // @column-barrier
  float s = 0.f;
  for (int c = 0; c < 32; ++c)
    s += tile[lane * pitch + (swz ? c ^ lane : c)];  // @column
  out[lane] = s;
}
// 128-bit shared loads by consecutive lanes: four phases of 8 lanes, no conflict.
__global__ void wide_loads(const float* x, float* out, int n) {
  __shared__ float4 v[32];
  v[threadIdx.x] = make_float4(1.f, 2.f, 3.f, 4.f);
  __syncwarp();
  reinterpret_cast<float4*>(out)[threadIdx.x] = v[threadIdx.x];  // @wide
}
// Lanes that read one word share it: two words in two banks, then 16 words each read
// by two lanes, take one wavefront each; rows of 17 floats written by lanes 0-15 of
// row r and 0-15 of row r + 1 meet in one bank: two.
__global__ void shared_reads(const float* x, float* out, int n) {
  __shared__ float s[64];
  const int l = threadIdx.x;
  s[l] = x[l];
  s[l + 32] = x[l];
  __syncthreads();
  float a = s[(l / 16) * 16];  // @two-words
  float b = s[l % 16];  // @pairs
  s[(l / 16) * 17 + l % 16] = a + b;  // @pitch-17
  __syncthreads();
  out[l] = s[(l / 16) * 17 + l % 16];
}

void launch_checked_case(int which, const float* x, float* out, int n, int blocks,
                         int threads, int smem) {
  switch (which) {
    case 0: write_past_end<<<blocks, threads>>>(out, n); break;
    case 1: read_before_start<<<blocks, threads>>>(x, out, n); break;
    case 2: dynamic_overrun<<<blocks, threads, smem>>>(out, n); break;
    case 3: static_overrun<<<blocks, threads>>>(out, n); break;
    case 4: atomic_past_end<<<blocks, threads>>>(out, n); break;
    case 5: block_sum<<<blocks, threads, smem>>>(x, out, n); break;
    case 6: warp_ordered<<<blocks, threads>>>(x, out, n); break;
    case 7: shared_counter<<<blocks, threads>>>(x, out, n); break;
    case 8: hidden_war<<<blocks, threads>>>(x, out, n); break;
    case 9: strided_load<<<blocks, threads>>>(x, out, n); break;
    case 10: tile_columns<<<blocks, threads, smem>>>(x, out, n); break;
    case 11: wide_loads<<<blocks, threads>>>(x, out, n); break;
    case 12: shared_reads<<<blocks, threads>>>(x, out, n); break;
    case 13: foreign_local<<<blocks, threads>>>(x, out, n); break;
    case 14: async_past_end<<<blocks, threads>>>(x, out, n); break;
    case 15: async_shift<<<blocks, threads>>>(x, out, n); break;
    case 16: half_race<<<blocks, threads>>>(x, out, n); break;
    case 17: static_at<<<blocks, threads>>>(out, n); break;
    case 18: local_past_end<<<blocks, threads>>>(x, out, n); break;
    case 19: flag_then_neighbour<<<blocks, threads>>>(x, out, n); break;
    default: dynamic_at<<<blocks, threads, smem>>>(out, n); break;
  }
}
"""

WRAPPER = r"""
void launch_checked_case(int, const float*, float*, int, int, int, int);
void run_case(int64_t which, at::Tensor x, at::Tensor out, int64_t n, int64_t blocks,
              int64_t threads, int64_t smem) {
  launch_checked_case(int(which), x.data_ptr<float>(), out.data_ptr<float>(), int(n),
                      int(blocks), int(threads), int(smem));
}
"""

CASES = ["write_past_end", "read_before_start", "dynamic_overrun", "static_overrun",
         "atomic_past_end", "block_sum", "warp_ordered", "shared_counter", "hidden_war",
         "strided_load", "tile_columns", "wide_loads", "shared_reads",
         "foreign_local", "async_past_end", "async_shift", "half_race", "static_at",
         "local_past_end", "flag_then_neighbour", "dynamic_at"]


@functools.cache
def extension():
    return ab.compile("checked_cases", SOURCE, WRAPPER, ["run_case"],
                      backend="emulator")


def run(kernel: str, x, out, n=0, blocks=1, threads=32, smem=0):
    extension().run_case(CASES.index(kernel), x, out, n, blocks, threads, smem)


def line_of(marker: str) -> str:
    """"cell.cu:N" of the line marked ``// @marker``."""
    for number, text in enumerate(SOURCE.splitlines(), start=1):
        if text.rstrip().endswith(f"// @{marker}"):
            return f"cell.cu:{number}"
    raise KeyError(marker)
