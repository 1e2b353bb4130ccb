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
    r->fault = {sig, si->si_code, self->linear, uintptr_t(si->si_addr),
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
  if (f.signo == SIGFPE) {
    memory = false;
    msg += f.code == FPE_INTDIV ? "integer division by zero" : "arithmetic exception";
    msg += " (SIGFPE; a GPU gives an unspecified value instead)";
  } else if (f.signo == SIGILL) {
    memory = false;
    msg += "illegal instruction (SIGILL)";
  } else if (f.addr >= dyn && f.addr < dyn + kDynamicSmemBytes) {
    std::snprintf(buf, sizeof buf,
                  "out-of-bounds shared memory access: byte %zu of dynamic shared "
                  "memory, of which the launch gave the block %zu bytes (SIGSEGV)",
                  size_t(f.addr - dyn), r.smem_bytes);
    msg += buf;
  } else if (f.addr >= fibers && f.addr - fibers < kArenaBytes - kRuntimeSlots *
                                                        kSlotBytes &&
             (f.addr - fibers) % kSlotBytes <
                 kGuardBytes + kStackBytes - r.stack_open) {
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
  if (memory) msg += "; inside attnbook.sanitize() memcheck names the first bad access";
  return msg;
}

}  // namespace attnbook_emu
