// Tensor-core building blocks: one small device function per PTX instruction the book
// uses. On a GPU each is the real instruction; on the CPU emulator each is a warp
// collective that rebuilds the matrices from the per-lane fragments of the PTX ISA and
// computes the result. All 32 lanes of the warp must call them together (they are
// .sync.aligned instructions).
#pragma once
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

// D = A B + C with A 16x8 (row), B 8x8 (col): the sm_75 (Turing) instruction.
__device__ __forceinline__ void mma_m16n8k8_f16(float* d, const uint32_t* a,
                                                const uint32_t* b, const float* c) {
#if defined(ATTNBOOK_EMULATOR)
  attnbook_emu::mma<__half, 8>(__LINE__, d, a, b, c);
#elif defined(__CUDA_ARCH__)
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 "
               "{%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%8,%9,%10};\n"
               : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(b[0]),
                 "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
#endif
}

// D = A B + C with A 16x16 (row), B 16x8 (col), fp32 accumulators; sm_80 and newer.
// a: 4 registers of packed f16 pairs, b: 2, c and d: 4 floats each.
__device__ __forceinline__ void mma_m16n8k16_f16(float* d, const uint32_t* a,
                                                 const uint32_t* b, const float* c) {
#if defined(ATTNBOOK_EMULATOR)
  attnbook_emu::mma<__half, 16>(__LINE__, d, a, b, c);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
               : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
                 "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
#elif defined(__CUDA_ARCH__)
  // sm_75 has no m16n8k16: two m16n8k8 steps over the two halves of K.
  float t[4];
  mma_m16n8k8_f16(t, a, b, c);
  const uint32_t a_hi[2] = {a[2], a[3]};
  mma_m16n8k8_f16(d, a_hi, b + 1, t);
#endif
}

__device__ __forceinline__ void mma_m16n8k16_bf16(float* d, const uint32_t* a,
                                                  const uint32_t* b, const float* c) {
#if defined(ATTNBOOK_EMULATOR)
  attnbook_emu::mma<__nv_bfloat16, 16>(__LINE__, d, a, b, c);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
               : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
                 "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
#elif defined(__CUDA_ARCH__)
  __trap();   // bf16 tensor cores need sm_80; the launcher rejects older GPUs first
#endif
}


// Load N (1, 2 or 4) 8x8 matrices of 16-bit elements from shared memory, one register
// per matrix per lane; lanes 8m..8m+7 pass the addresses of matrix m's eight rows (16
// bytes each, 16-byte aligned). Trans delivers each matrix transposed.
template <int N, bool Trans = false>
__device__ __forceinline__ void ldmatrix(uint32_t* r, const void* smem_row) {
  static_assert(N == 1 || N == 2 || N == 4, "ldmatrix loads 1, 2 or 4 matrices");
#if defined(ATTNBOOK_EMULATOR)
  attnbook_emu::ldmatrix<N, Trans>(__LINE__, r, smem_row);
#elif defined(__CUDA_ARCH__)
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem_row));
  if constexpr (N == 1 && !Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n"
                 : "=r"(r[0]) : "r"(addr) : "memory");
  else if constexpr (N == 1)
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n"
                 : "=r"(r[0]) : "r"(addr) : "memory");
  else if constexpr (N == 2 && !Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(addr) : "memory");
  else if constexpr (N == 2)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(addr) : "memory");
  else if constexpr (!Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
#endif
}

// Asynchronous 16-byte copy global -> shared (sm_80+), grouped by commit and awaited by
// wait: wait<N> returns once at most N of the committed groups are still in flight. The
// emulator and sm_75 copy at once, so for them commit and wait have nothing to do.
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(addr), "l"(gmem)
               : "memory");
#else
  *static_cast<uint4*>(smem) = *static_cast<const uint4*>(gmem);
#endif
}

// The same for 4 bytes (cp.async.ca: through L1, the only path below 16 bytes).
__device__ __forceinline__ void cp_async_4(void* smem, const void* gmem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(addr), "l"(gmem)
               : "memory");
#else
  *static_cast<uint32_t*>(smem) = *static_cast<const uint32_t*>(gmem);
#endif
}

__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}
