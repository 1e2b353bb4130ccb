// The emulator runtime's faults (see emu_runtime.h): a thread's SIGSEGV, SIGBUS,
// SIGFPE or SIGILL in kernel code, stopped and named.
#pragma once

#include "emu_hang_guard.h"

namespace attnbook_emu {

// ---- faults -------------------------------------------------------------------------
// A wild access, a stack overflow or a division by zero in kernel code raises
// SIGSEGV, SIGBUS, SIGFPE or SIGILL on the worker running it; on a GPU it is a CUDA
// error and the process goes on, so here too. The handler runs on the worker's own
// signal stack (an overflowing fiber has no stack left) and asks which stack the
// fault interrupted: a fiber stack in one of this extension's arenas means a thread of
// one of its blocks, which is abandoned as the hang guard abandons one (its frames
// never unwound), with what happened left in Runtime::fault for run_block to report.
// Any other fault (the emulator's own scheduler, Python, another extension's workers)
// goes on to the handler that was installed before, down to the default: a crash, as
// without the emulator.
// A fault inside a library call made by kernel code (memcpy, printf given a bad
// pointer) is caught too; a lock that call held (stdout's) stays held.
constexpr int kFaultSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL};
inline struct sigaction* previous_fault_actions() {
  static struct sigaction old[4];
  return old;
}

inline void use_signal_stack(Runtime& r) {
  stack_t old;
  if (sigaltstack(nullptr, &old) == 0 && !(old.ss_flags & SS_DISABLE)) return;
  stack_t ss{};
  ss.ss_sp = r.signal_stack;
  ss.ss_size = sizeof r.signal_stack;
  sigaltstack(&ss, nullptr);
}

constexpr int kDivisionUnknown = 0x1000;   // si_code of neither kind: see below
#if defined(__x86_64__) && !defined(ATTNBOOK_EMU_USE_UCONTEXT)
// x86-64 raises one fault (#DE, SIGFPE with FPE_INTDIV) for a division by zero and for
// the most negative integer divided by -1, whose quotient does not fit. Which it was:
// the divisor of the faulting idiv where it is a register (-1: FPE_INTOVF), else
// kDivisionUnknown where the dividend is the most negative integer (a divisor in
// memory), else FPE_INTDIV.
__attribute__((no_sanitize("thread"))) inline int division_fault(const ucontext_t* uc) {
  const greg_t* g = uc->uc_mcontext.gregs;
  const auto* p = reinterpret_cast<const uint8_t*>(g[REG_RIP]);
  int width = 32;
  for (; *p == 0x66 || *p == 0x67 || *p == 0xf2 || *p == 0xf3 || *p == 0x2e ||
         *p == 0x3e || *p == 0x26 || *p == 0x36 || *p == 0x64 || *p == 0x65; ++p)
    if (*p == 0x66) width = 16;                    // operand-size prefix
  const uint8_t rex = (*p & 0xf0) == 0x40 ? *p++ : 0;
  if (rex & 8) width = 64;
  if (*p == 0xf6) width = 8;
  else if (*p != 0xf7) return FPE_INTDIV;
  const uint8_t modrm = p[1];
  if ((modrm >> 3 & 7) != 7) return FPE_INTDIV;   // div, not idiv: only by zero
  const uint64_t mask = width == 64 ? ~uint64_t(0) : (uint64_t(1) << width) - 1;
  if (modrm >> 6 == 3) {
    static constexpr int regs[16] = {REG_RAX, REG_RCX, REG_RDX, REG_RBX, REG_RSP,
                                     REG_RBP, REG_RSI, REG_RDI, REG_R8,  REG_R9,
                                     REG_R10, REG_R11, REG_R12, REG_R13, REG_R14,
                                     REG_R15};
    const int rm = (modrm & 7) | (rex & 1) << 3;
    uint64_t divisor = uint64_t(g[regs[rm]]);
    if (width == 8 && !rex && rm >= 4) divisor = uint64_t(g[regs[rm - 4]]) >> 8;
    return (divisor & mask) == mask ? FPE_INTOVF : FPE_INTDIV;
  }
  const uint64_t most_negative = (mask >> 1) + 1;
  const bool most = (uint64_t(g[REG_RAX]) & mask) == most_negative;
  return most ? kDivisionUnknown : FPE_INTDIV;
}
#endif

// Uninstrumented in the checked build, like on_cancel_signal.
__attribute__((no_sanitize("thread"))) inline void on_fault(int sig, siginfo_t* si,
                                                           void* ucv) {
#if defined(__x86_64__) && !defined(ATTNBOOK_EMU_USE_UCONTEXT)
  auto* uc = static_cast<ucontext_t*>(ucv);
  auto sp = uintptr_t(uc->uc_mcontext.gregs[REG_RSP]);
  Runtime* r = arena_of(sp);
  uintptr_t fibers = reinterpret_cast<uintptr_t>(r) + kRuntimeSlots * kSlotBytes;
  if (r && r->cur && sp >= fibers) {
    Thread* self = r->cur;
    // The page fault's error code: bit 1 set for a write.
    bool write = sig == SIGSEGV && (uc->uc_mcontext.gregs[REG_ERR] & 2);
    const int code = sig == SIGFPE && si->si_code == FPE_INTDIV ? division_fault(uc)
                                                                 : si->si_code;
    r->fault = {sig, code, self->linear, uintptr_t(si->si_addr),
                uintptr_t(uc->uc_mcontext.gregs[REG_RIP]), write};
    r->cur = nullptr;
    // SA_NODEFER: leaving the handler this way leaves the signal unblocked; the
    // signal stack is free again once the stack pointer has left it.
    Context::jump(self->ctx, r->scheduler);
  }
#endif
  int i = 0;
  while (kFaultSignals[i] != sig) ++i;
  const struct sigaction& old = previous_fault_actions()[i];
  if (old.sa_flags & SA_SIGINFO) {
    old.sa_sigaction(sig, si, ucv);
  } else if (old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN) {
    old.sa_handler(sig);
  } else {   // the faulting instruction runs again, and kills the process
    signal(sig, SIG_DFL);
  }
}

inline void install_fault_handlers() {
  struct sigaction sa {};
  sa.sa_sigaction = &on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < 4; ++i)
    sigaction(kFaultSignals[i], &sa, &previous_fault_actions()[i]);
}

// Where a faulting address lies, where another library knows more than the runtime:
// the guard pages of a call's tensors (emulator/guard.cpp, which Python hands to each
// extension it guards) write ", 16 bytes past the end of a 4000-byte tensor" into
// `out` (a C string of at most `n` bytes), or nothing.
using DescribeAddress = void (*)(uintptr_t addr, char* out, size_t n);
inline DescribeAddress describe_address = nullptr;

// What the fault of a block's thread was, for the exception: which thread, what it
// did, where (@pc(offset in this library), which Python turns into file:line).
inline std::string fault_message(Runtime& r) {
  const Runtime::Fault& f = r.fault;
  const Thread& t = r.threads[f.thread];
  char buf[512];
  std::snprintf(buf, sizeof buf, "kernel '%s', block (%u,%u,%u), thread (%u,%u,%u): ",
                r.kernel, r.block_idx.x, r.block_idx.y, r.block_idx.z, t.tid.x, t.tid.y,
                t.tid.z);
  std::string msg = buf;
  auto dyn = reinterpret_cast<uintptr_t>(r.dynamic_smem);
  uintptr_t fibers = reinterpret_cast<uintptr_t>(&r) + kRuntimeSlots * kSlotBytes;
  bool memory = true;
  // In a fiber slot's guard, or in the part of its stack beyond cudaLimitStackSize.
  const bool stack_guard =
      f.addr >= fibers && f.addr - fibers < kArenaBytes - kRuntimeSlots * kSlotBytes &&
      (f.addr - fibers) % kSlotBytes < kGuardBytes + kStackBytes - r.stack_open;
  const auto top = reinterpret_cast<uintptr_t>(stack_top(r, int(f.thread)));
  if (f.signo == SIGFPE) {
    memory = false;
    msg += f.code == FPE_INTDIV ? "integer division by zero"
           : f.code == FPE_INTOVF
               ? "integer division overflow: the most negative integer divided by -1"
           : f.code == kDivisionUnknown
               ? "integer division by zero, or of the most negative integer by -1"
               : "arithmetic exception";
    msg += " (SIGFPE; a GPU gives an unspecified value instead)";
  } else if (f.signo == SIGILL) {
    memory = false;
    msg += "illegal instruction (SIGILL)";
  } else if (f.addr + kPageBytes >= dyn &&
             f.addr < dyn + kDynamicSmemBytes + kSmemGuardAbove) {
    std::snprintf(buf, sizeof buf,
                  "out-of-bounds shared memory access: byte %lld of dynamic shared "
                  "memory, of which the launch gave the block %zu bytes (SIGSEGV)",
                  (long long)(f.addr - dyn), r.smem_bytes);
    msg += buf;
  } else if (stack_guard && f.addr >= top) {   // the next slot's: above the stack
    std::snprintf(buf, sizeof buf,
                  "illegal memory access: a %s %zu bytes above the top of the "
                  "thread's stack (a local array indexed past its end) (SIGSEGV)",
                  f.write ? "write" : "read", size_t(f.addr - top));
    msg += buf;
  } else if (stack_guard) {
    memory = false;
    std::snprintf(buf, sizeof buf,
                  "stack overflow: the thread used more than its %zu KiB of stack "
                  "(cudaLimitStackSize in whole pages, and %zu KiB for the emulator's "
                  "own frames; recursion too deep, or local arrays too large) "
                  "(SIGSEGV)", r.stack_open / 1024, kEmulatorFrameBytes / 1024);
    msg += buf;
  } else if (f.addr == 0 && f.code == SI_KERNEL) {
    msg += "illegal memory access: an address outside the CPU's address space "
           "(SIGSEGV)";
  } else {
    std::snprintf(buf, sizeof buf, "illegal memory access: a %s at address 0x%llx (%s)",
                  f.signo != SIGSEGV ? "access" : f.write ? "write" : "read",
                  (unsigned long long)f.addr, f.signo == SIGBUS ? "SIGBUS" : "SIGSEGV");
    msg += buf;
    if (describe_address) {
      buf[0] = 0;
      describe_address(f.addr, buf, sizeof buf);
      msg += buf;
    }
  }
  Dl_info info;
  if (own_code(f.pc) && dladdr(reinterpret_cast<void*>(&fault_message), &info)) {
    std::snprintf(buf, sizeof buf, " at @pc(0x%llx)",
                  (unsigned long long)(f.pc - uintptr_t(info.dli_fbase)));
    msg += buf;
  }
  if (memory) msg += "; inside sanitize() memcheck names the first bad access";
  return msg;
}

}  // namespace attnbook_emu
