// Guard pages around the tensors of a call, so that a kernel that writes past the end
// of a tensor on the emulator stops with a KernelFault instead of corrupting the heap.
//
// On a GPU a write a little past a cudaMalloc'd buffer lands in the allocation's
// rounding (silent) or in unmapped memory (an illegal-address error; the process
// lives). On the CPU it lands in the neighbouring malloc chunk, and the process dies
// later, far from the kernel. While a call of a reader's module runs in the default
// (unchecked) mode, Python installs GuardedCpuAllocator as torch's CPU allocator
// (attnbook_guard_install ... attnbook_guard_restore; see guard.py) and copies the
// call's tensors into memory it allocates. Each allocation is its own mapping:
//
//   [ kBeforeBytes PROT_NONE ][ pages: slack | data, n bytes | tail < 16 B ]
//   [ kAfterBytes PROT_NONE ]
//
// so data ends on a page boundary (its end rounded up to 16 bytes: the alignment of
// a float4), and an access up to kAfterBytes past the end or kBeforeBytes before the
// start of the pages faults; attnbook_guard_describe, which each guarded extension's
// fault message calls, then names it "N bytes past the end of a B-byte tensor".
// The slack before the data (under a page) and the tail after it hold kCanary bytes:
// a write there does not fault, but attnbook_guard_check, called after the call,
// finds the changed bytes and names them the same way.
// The guards are address space only: they cost no memory. A freed mapping is kept for
// the next allocation of as many pages (up to kPoolBytes in all), as malloc keeps its
// memory: a new mapping's every page faults on first touch, a cost that would
// otherwise recur at each call.
//
// A library of its own, built once (guard.py), not a header of every extension: the
// allocator is one for the process, as torch's CPU allocator is, and a kernel's
// translation unit stays as small as the kernel (its code, and so its speed on the
// emulator, does not depend on the guard).
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <thread>
#include <sys/mman.h>
#include <unistd.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

namespace {

constexpr size_t kBeforeBytes = size_t(64) << 10;
constexpr size_t kAfterBytes = size_t(1) << 20;
constexpr size_t kPoolBytes = size_t(256) << 20;
constexpr unsigned char kCanary = 0xa5;


struct GuardedMapping {
  size_t bytes;        // of the whole mapping, guards included
  uintptr_t data;      // where the tensor's bytes start
  size_t data_bytes;   // as requested
  uintptr_t body;      // the first writable byte: data - body bytes of slack
  uint64_t serial;     // allocations before this one, process-wide
  std::thread::id owner;   // the thread that asked for it
};

// ", N bytes past the end of a B-byte tensor" (or before its start) for address `a`
// near guarded data, into `out`.
void name_place(const GuardedMapping& g, uintptr_t a, char* out, size_t n) {
  if (a >= g.data + g.data_bytes)
    std::snprintf(out, n, ", %zu bytes past the end of a %zu-byte tensor",
                  size_t(a - g.data - g.data_bytes), g.data_bytes);
  else if (a < g.data)
    std::snprintf(out, n, ", %zu bytes before the start of a %zu-byte tensor",
                  size_t(g.data - a), g.data_bytes);
}

// The first changed canary byte in [from, to), or 0.
uintptr_t changed(uintptr_t from, uintptr_t to) {
  for (uintptr_t a = from; a < to; ++a)
    if (*reinterpret_cast<const unsigned char*>(a) != kCanary) return a;
  return 0;
}

struct GuardedCpuAllocator final : c10::Allocator {
  std::mutex m;
  std::map<uintptr_t, GuardedMapping> mappings;   // by the mapping's first byte
  std::multimap<size_t, uintptr_t> pool;          // freed mappings, by their bytes
  size_t pooled_bytes = 0;                        // their pages, guards aside
  c10::Allocator* saved = nullptr;                // torch's allocator, while installed
  uint64_t allocations = 0;

  static GuardedCpuAllocator& instance() {
    static GuardedCpuAllocator a;
    return a;
  }

  c10::DataPtr allocate(size_t n) override {
    const c10::Device cpu(c10::DeviceType::CPU);
    if (n == 0) return {nullptr, nullptr, &release, cpu};
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    const size_t padded = (n + 15) / 16 * 16;
    const size_t body = (padded + page - 1) / page * page;
    const size_t total = kBeforeBytes + body + kAfterBytes;
    void* base = reused(total);
    if (!base) {
      base = mmap(nullptr, total, PROT_NONE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (base == MAP_FAILED) throw std::bad_alloc();
      if (mprotect(static_cast<char*>(base) + kBeforeBytes, body,
                   PROT_READ | PROT_WRITE) != 0) {
        munmap(base, total);
        throw std::bad_alloc();
      }
    }
    char* first = static_cast<char*>(base) + kBeforeBytes;
    char* data = first + body - padded;
    std::memset(first, kCanary, body - padded);
    std::memset(data + n, kCanary, padded - n);
    {
      std::lock_guard<std::mutex> lock(m);
      mappings[uintptr_t(base)] = {total, uintptr_t(data), n, uintptr_t(first),
                                   allocations++, std::this_thread::get_id()};
    }
    return {data, base, &release, cpu};
  }

  // A pooled mapping of `total` bytes, or nullptr.
  void* reused(size_t total) {
    std::lock_guard<std::mutex> lock(m);
    auto it = pool.find(total);
    if (it == pool.end()) return nullptr;
    void* base = reinterpret_cast<void*>(it->second);
    pool.erase(it);
    pooled_bytes -= total - kBeforeBytes - kAfterBytes;
    return base;
  }

  static void release(void* base) {
    if (!base) return;
    auto& a = instance();
    size_t bytes;
    {
      std::lock_guard<std::mutex> lock(a.m);
      auto it = a.mappings.find(uintptr_t(base));
      if (it == a.mappings.end()) return;
      bytes = it->second.bytes;
      a.mappings.erase(it);
      const size_t pages = bytes - kBeforeBytes - kAfterBytes;
      if (a.pooled_bytes + pages <= kPoolBytes) {
        a.pool.emplace(bytes, uintptr_t(base));
        a.pooled_bytes += pages;
        return;
      }
    }
    munmap(base, bytes);
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  // ", N bytes past the end of a B-byte tensor" for an address in a guard, into
  // `out`; nothing otherwise.
  void describe(uintptr_t a, char* out, size_t n) {
    std::lock_guard<std::mutex> lock(m);
    auto it = mappings.upper_bound(a);
    if (it == mappings.begin()) return;
    --it;
    const GuardedMapping& g = it->second;
    if (a < it->first + g.bytes) name_place(g, a, out, n);
  }

  // The allocations this thread made from the `since`-th on: the first changed
  // canary byte of one, named into `out` as describe names an address (the canary
  // put back); nothing if none changed.
  void check(uint64_t since, char* out, size_t n) {
    std::lock_guard<std::mutex> lock(m);
    for (auto& [base, g] : mappings) {
      if (g.serial < since || g.owner != std::this_thread::get_id()) continue;
      const uintptr_t end = (g.data + g.data_bytes + 15) / 16 * 16;
      uintptr_t a = changed(g.body, g.data);
      if (!a) a = changed(g.data + g.data_bytes, end);
      if (!a) continue;
      name_place(g, a, out, n);
      std::memset(reinterpret_cast<void*>(g.body), kCanary, g.data - g.body);
      std::memset(reinterpret_cast<void*>(g.data + g.data_bytes), kCanary,
                  end - g.data - g.data_bytes);
      return;
    }
  }
};

}  // namespace

// Python (guard.py) calls these through ctypes: install makes the guarded allocator
// torch's CPU allocator, restore puts torch's back, mark and check find the canary
// bytes a call changed; describe is handed to each guarded extension
// (attnbook_set_describe_address, cuda_emulator.h) for its fault messages.
#define ATTNBOOK_GUARD_API extern "C" __attribute__((visibility("default")))

ATTNBOOK_GUARD_API void attnbook_guard_install() {
  auto& a = GuardedCpuAllocator::instance();
  if (c10::GetCPUAllocator() == &a) return;
  a.saved = c10::GetCPUAllocator();
  c10::SetCPUAllocator(&a, 255);
}

ATTNBOOK_GUARD_API void attnbook_guard_restore() {
  auto& a = GuardedCpuAllocator::instance();
  if (a.saved) c10::SetCPUAllocator(a.saved, 255);
  a.saved = nullptr;
}

// The number of allocations so far, for attnbook_guard_check.
ATTNBOOK_GUARD_API uint64_t attnbook_guard_mark() {
  auto& a = GuardedCpuAllocator::instance();
  std::lock_guard<std::mutex> lock(a.m);
  return a.allocations;
}

ATTNBOOK_GUARD_API void attnbook_guard_check(uint64_t since, char* out, size_t n) {
  GuardedCpuAllocator::instance().check(since, out, n);
}

ATTNBOOK_GUARD_API void attnbook_guard_describe(uintptr_t a, char* out, size_t n) {
  GuardedCpuAllocator::instance().describe(a, out, n);
}
