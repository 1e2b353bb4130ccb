// Part of the emulator's checked build, its last header, on emu_checked.h; emu_hooks.h
// includes it in a checked build.
#pragma once

#include "emu_checked.h"

// ---- what GCC's -fsanitize=thread calls --------------------------------------------
// Types as GCC declares these built-ins (unsigned char/short/int/long values, void*).
// Inline and `used`: each file of an extension defines them, the linker keeps one.
#define ATTNBOOK_TSAN extern "C" inline __attribute__((used)) ATTNBOOK_UNCHECKED
#define ATTNBOOK_TSAN_ACCESS(N)                                                        \
  ATTNBOOK_TSAN void __tsan_read##N(void* p) {                                         \
    ::attnbook_emu::access(p, N, false, __builtin_return_address(0));                  \
  }                                                                                    \
  ATTNBOOK_TSAN void __tsan_write##N(void* p) {                                        \
    ::attnbook_emu::access(p, N, true, __builtin_return_address(0));                   \
  }                                                                                    \
  ATTNBOOK_TSAN void __tsan_unaligned_read##N(void* p) {                               \
    ::attnbook_emu::access(p, N, false, __builtin_return_address(0));                  \
  }                                                                                    \
  ATTNBOOK_TSAN void __tsan_unaligned_write##N(void* p) {                              \
    ::attnbook_emu::access(p, N, true, __builtin_return_address(0));                   \
  }
ATTNBOOK_TSAN_ACCESS(1)
ATTNBOOK_TSAN_ACCESS(2)
ATTNBOOK_TSAN_ACCESS(4)
ATTNBOOK_TSAN_ACCESS(8)
ATTNBOOK_TSAN_ACCESS(16)
ATTNBOOK_TSAN void __tsan_read_range(void* p, unsigned long n) {
  ::attnbook_emu::access(p, n, false, __builtin_return_address(0));
}
ATTNBOOK_TSAN void __tsan_write_range(void* p, unsigned long n) {
  ::attnbook_emu::access(p, n, true, __builtin_return_address(0));
}
ATTNBOOK_TSAN void __tsan_vptr_update(void**, void*) {}
ATTNBOOK_TSAN void __tsan_vptr_read(void**) {}
ATTNBOOK_TSAN void __tsan_func_entry(void*) {}
ATTNBOOK_TSAN void __tsan_func_exit() {}
ATTNBOOK_TSAN void __tsan_init() {}
ATTNBOOK_TSAN void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(5); }
ATTNBOOK_TSAN void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(5); }

// Atomics: checked as accesses (never as races), then done sequentially consistent.
// NAME: ThreadSanitizer's name of the operation; BUILTIN: GCC's.
#define ATTNBOOK_TSAN_RMW(N, T, NAME, BUILTIN, KIND)                                   \
  ATTNBOOK_TSAN T __tsan_atomic##N##_##NAME(volatile void* a, T v, int) {              \
    ::attnbook_emu::access(const_cast<void*>(a), N / 8, true,                          \
                           __builtin_return_address(0), ::attnbook_emu::KIND);         \
    return __atomic_##BUILTIN(static_cast<volatile T*>(a), v, __ATOMIC_SEQ_CST);       \
  }
#define ATTNBOOK_TSAN_ATOMICS(N, T)                                                    \
  ATTNBOOK_TSAN T __tsan_atomic##N##_load(const volatile void* a, int) {               \
    ::attnbook_emu::access(const_cast<void*>(a), N / 8, false,                         \
                           __builtin_return_address(0), ::attnbook_emu::kAtomic);      \
    return __atomic_load_n(static_cast<const volatile T*>(a), __ATOMIC_SEQ_CST);       \
  }                                                                                    \
  ATTNBOOK_TSAN void __tsan_atomic##N##_store(volatile void* a, T v, int) {            \
    ::attnbook_emu::access(const_cast<void*>(a), N / 8, true,                          \
                           __builtin_return_address(0), ::attnbook_emu::kAtomic);      \
    __atomic_store_n(static_cast<volatile T*>(a), v, __ATOMIC_SEQ_CST);                \
  }                                                                                    \
  ATTNBOOK_TSAN_RMW(N, T, exchange, exchange_n, kAtomic)                               \
  ATTNBOOK_TSAN_RMW(N, T, fetch_add, fetch_add, kAtomicUpdate)                         \
  ATTNBOOK_TSAN_RMW(N, T, fetch_sub, fetch_sub, kAtomicUpdate)                         \
  ATTNBOOK_TSAN_RMW(N, T, fetch_and, fetch_and, kAtomicUpdate)                         \
  ATTNBOOK_TSAN_RMW(N, T, fetch_or, fetch_or, kAtomicUpdate)                           \
  ATTNBOOK_TSAN_RMW(N, T, fetch_xor, fetch_xor, kAtomicUpdate)                         \
  ATTNBOOK_TSAN_RMW(N, T, fetch_nand, fetch_nand, kAtomicUpdate)                       \
  ATTNBOOK_TSAN bool __tsan_atomic##N##_compare_exchange_strong(                       \
      volatile void* a, void* c, T v, int, int) {                                      \
    ::attnbook_emu::access(const_cast<void*>(a), N / 8, true,                          \
                           __builtin_return_address(0),                                \
                           ::attnbook_emu::kAtomicUpdate);                             \
    return __atomic_compare_exchange_n(static_cast<volatile T*>(a),                    \
                                       static_cast<T*>(c), v, false,                   \
                                       __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);            \
  }                                                                                    \
  ATTNBOOK_TSAN bool __tsan_atomic##N##_compare_exchange_weak(                         \
      volatile void* a, void* c, T v, int m, int f) {                                  \
    return __tsan_atomic##N##_compare_exchange_strong(a, c, v, m, f);                  \
  }                                                                                    \
  ATTNBOOK_TSAN T __tsan_atomic##N##_compare_exchange_val(volatile void* a, T c, T v,  \
                                                          int m, int f) {              \
    __tsan_atomic##N##_compare_exchange_strong(a, &c, v, m, f);                        \
    return c;                                                                          \
  }
ATTNBOOK_TSAN_ATOMICS(8, unsigned char)
ATTNBOOK_TSAN_ATOMICS(16, unsigned short)
ATTNBOOK_TSAN_ATOMICS(32, unsigned int)
ATTNBOOK_TSAN_ATOMICS(64, unsigned long)
#undef ATTNBOOK_TSAN_ATOMICS
#undef ATTNBOOK_TSAN_RMW
#undef ATTNBOOK_TSAN_ACCESS
