// The emulator runtime's hang guard (see emu_runtime.h): the watchdog that stops a
// launch past its time budget or interrupted, and the message it then raises.
#pragma once

#include "emu_blocks.h"

namespace attnbook_emu {

// ---- hang guard ---------------------------------------------------------------------
// A fiber that never reaches a synchronisation point (an endless loop, a spin on a flag
// that another warp of the block would set: fibers do not preempt each other) would
// hang the launch, and the notebook with it. A watchdog thread per extension watches
// each launch: once no thread of it has passed a barrier or finished for a while (a
// hang: ATTNBOOK_EMU_STALL seconds, 60 by default), past a time budget set for all of
// it (ATTNBOOK_EMU_TIMEOUT seconds; 0: no limit at all, the stall guard included), or
// once SIGINT arrived during the launch, it sets job.cancel and then
// signals every worker of the launch every millisecond (cancel_signal(), through
// pthread_sigqueue, whose value names the handler of this extension). The handler
// abandons the running fiber by switching to the worker's scheduler context, as if the
// fiber had finished, but only where that is safe: the fiber is running (its stack
// pointer lies in the worker's arena) and the interrupted instruction belongs to this
// extension (kernel code or the emulator's own), never libc or libstdc++, which may
// hold a lock (malloc's, stdio's). A fiber stuck in a library call (a printf in a
// loop) is caught once a signal finds it back in kernel code (a loop that spends
// nearly all its time printing to a file: up to tens of seconds). The abandoned
// fiber's frames are never unwound: destructors of its locals do not run (kernel code
// has none that matter). Without x86-64 the handler does nothing: only blocks not yet
// started are cancelled.
constexpr double kDefaultStallSeconds = 60;
constexpr int kTimeout = 1, kInterrupt = 2, kStalled = 3;
inline int cancel_signal() { return SIGRTMIN + 5; }

// The executable segments of this extension, found once outside any signal handler.
struct CodeRanges {
  uintptr_t lo[8], hi[8];
  int n = 0;
};
inline CodeRanges& code_ranges() {
  static CodeRanges c;
  return c;
}
inline void find_code_ranges() {
  CodeRanges& c = code_ranges();
  if (c.n) return;
  Dl_info info;
  if (!dladdr(reinterpret_cast<void*>(&find_code_ranges), &info)) return;
  struct Ctx { void* base; CodeRanges* c; } ctx{info.dli_fbase, &c};
  dl_iterate_phdr([](dl_phdr_info* i, size_t, void* p) -> int {
    auto* x = static_cast<Ctx*>(p);
    for (int k = 0; k < i->dlpi_phnum; ++k) {
      const auto& h = i->dlpi_phdr[k];
      if (h.p_type != PT_LOAD || !(h.p_flags & PF_X)) continue;
      if (x->base != reinterpret_cast<void*>(i->dlpi_addr)) return 0;
      uintptr_t lo = i->dlpi_addr + h.p_vaddr;
      if (x->c->n < 8) {
        x->c->lo[x->c->n] = lo;
        x->c->hi[x->c->n++] = lo + h.p_memsz;
      }
    }
    return 0;
  }, &ctx);
}
inline bool own_code(uintptr_t pc) {
  const CodeRanges& c = code_ranges();
  for (int i = 0; i < c.n; ++i)
    if (c.lo[i] <= pc && pc < c.hi[i]) return true;
  return false;
}

// Called by the signal handler (any extension's: it dispatches on the signal's value).
// Uninstrumented in the checked build: it runs on a fiber, in the middle of kernel
// code, where its reads would count as the kernel's (until the guard below).
__attribute__((no_sanitize("thread"))) inline void on_cancel_signal(void* ucv) {
#if defined(__x86_64__) && !defined(ATTNBOOK_EMU_USE_UCONTEXT)
  Runtime* r = worker_runtime();
  if (!r) return;
  EmulatorCode guard(*r);   // it may interrupt kernel code
  if (!r->cur || !r->cancel || !r->cancel->load(std::memory_order_relaxed)) return;
  auto* uc = static_cast<ucontext_t*>(ucv);
  auto pc = uintptr_t(uc->uc_mcontext.gregs[REG_RIP]);
  auto sp = uintptr_t(uc->uc_mcontext.gregs[REG_RSP]);
  if ((sp & ~uintptr_t(kArenaBytes - 1)) != reinterpret_cast<uintptr_t>(r)) return;
  if (!own_code(pc)) return;
  Thread* self = r->cur;
  r->stopped = 1;
  r->cur = nullptr;
  // SA_NODEFER: leaving the handler this way leaves the signal unblocked.
  Context::jump(self->ctx, r->scheduler);
#else
  (void)ucv;
#endif
}

extern "C" inline void attnbook_emu_dispatch(int, siginfo_t* si, void* uc) {
  if (si->si_code == SI_QUEUE && si->si_value.sival_ptr)
    reinterpret_cast<void (*)(void*)>(si->si_value.sival_ptr)(uc);
}

inline std::atomic<int>& sigint_seen() {
  static std::atomic<int> seen{0};
  return seen;
}
extern "C" inline void attnbook_emu_on_sigint(int) {
  sigint_seen().store(1);
}

// What the stopped block had left: how many threads had not finished, and a few.
inline std::string unfinished(Runtime& r) {
  int left = 0;
  std::string some;
  for (auto& t : r.threads) {
    if (t.state == State::Done) continue;
    if (++left <= 4) {
      char buf[48];
      std::snprintf(buf, sizeof buf, "%s(%u,%u,%u)", left > 1 ? ", " : "", t.tid.x,
                    t.tid.y, t.tid.z);
      some += buf;
    }
  }
  char buf[160];
  std::snprintf(buf, sizeof buf,
                "block (%u,%u,%u): %d of %d threads had not finished, threads ",
                r.block_idx.x, r.block_idx.y, r.block_idx.z, left, r.nthreads);
  return buf + some + (left > 4 ? ", ..." : "");
}

struct Watch {
  std::mutex m;
  std::condition_variable cv;
  Job* job = nullptr;        // the launch being watched
  bool started = false;
  bool asleep = false;       // waiting for a notify (else it looks every 20 ms)
  pid_t pid = getpid();
};

// Between launches the watchdog keeps looking every 20 ms for a second before it
// sleeps until notified: a notify (a system call) per launch would cost launches in a
// loop a few microseconds each.
inline void watchdog_main(Watch* w) {
  std::unique_lock<std::mutex> lock(w->m);
  int idle = 0;
  for (;;) {
    if (!w->job && idle >= 50) {
      w->asleep = true;
      w->cv.wait(lock);
      w->asleep = false;
      idle = 0;
      continue;
    }
    Job* job = w->job;
    // Once cancelled, look (and signal) every millisecond: a fiber that spends most
    // of its time in a library call (printf in a loop) is sooner caught in its own
    // code.
    bool cancelled = job && job->cancel.load();
    w->cv.wait_for(lock, std::chrono::milliseconds(cancelled ? 1 : 20));
    if (!job) {
      ++idle;
      continue;
    }
    idle = 0;
    if (w->job != job) continue;   // that launch is over (job may be gone)
    if (!job->cancel.load()) {
      int why = 0;
      const auto now = std::chrono::steady_clock::now();
      const uint64_t progress = job->progress.load(std::memory_order_relaxed);
      if (progress != job->progress_seen) {
        job->progress_seen = progress;
        job->progressed = now;
      }
      if (sigint_seen().load()) why = kInterrupt;
      else if (job->budget_ns > 0 &&
               now - job->start > std::chrono::nanoseconds(job->budget_ns))
        why = kTimeout;
      else if (job->stall_ns > 0 &&
               now - job->progressed > std::chrono::nanoseconds(job->stall_ns))
        why = kStalled;
      if (!why) continue;
      job->cancel.store(why);
    }
    // Until the launch ends: a fiber in a library call is caught later.
    sigval v;
    v.sival_ptr = reinterpret_cast<void*>(&on_cancel_signal);
    int n = std::min(job->ntids.load(), job->max_tids);
    for (int i = 0; i < n; ++i)
      if (pthread_t t = job->tids[i].load()) pthread_sigqueue(t, cancel_signal(), v);
  }
}

inline Watch& watch() {
  static Watch* w = new Watch();   // never destroyed, like the pool
  // A forked child has no watchdog thread: it starts one of its own.
  if (w->pid != getpid()) w = new Watch();
  return *w;
}

// Seconds from the environment variable `name` as nanoseconds; `unset` if it is not
// set (0: no limit).
inline int64_t seconds_from_env(const char* name, double unset) {
  const char* s = std::getenv(name);
  double sec = unset;
  if (s && *s) {
    char* end;
    sec = std::strtod(s, &end);
    if (*end || !(sec >= 0))
      throw std::invalid_argument(std::string(name) + " must be a number of seconds "
                                  ">= 0, got '" + s + "'");
  }
  return sec < 0 ? -1 : sec > 1e9 ? 0 : int64_t(sec * 1e9);
}

// The job's limits: the stall guard, and a time budget for the whole launch where one
// is set; ATTNBOOK_EMU_TIMEOUT=0 turns both off.
inline void limits_from_env(Job& job) {
  const int64_t total = seconds_from_env("ATTNBOOK_EMU_TIMEOUT", -1);   // -1: unset
  job.budget_ns = std::max<int64_t>(total, 0);
  job.stall_ns =
      total == 0 ? 0 : seconds_from_env("ATTNBOOK_EMU_STALL", kDefaultStallSeconds);
}

// The exception of a cancelled launch: what was left, and why.
inline std::string cancelled_message(Job& job) {
  double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                             job.start).count();
  char buf[256];
  if (job.cancel.load() == kTimeout)
    std::snprintf(buf, sizeof buf, "kernel '%s' ran past its time budget of %.3g s "
                  "(ATTNBOOK_EMU_TIMEOUT, or attnbook.time_budget) and was stopped "
                  "after %.3g s", job.kernel, job.budget_ns / 1e9, sec);
  else if (job.cancel.load() == kStalled)
    std::snprintf(buf, sizeof buf, "kernel '%s' made no progress for %.3g s (no thread "
                  "passed a barrier or finished: a hang) and was stopped after %.3g s",
                  job.kernel, job.stall_ns / 1e9, sec);
  else
    std::snprintf(buf, sizeof buf, "kernel '%s' was interrupted after %.3g s",
                  job.kernel, sec);
  std::string msg = buf;
  uint64_t done = job.finished.load();
  std::snprintf(buf, sizeof buf, "; %llu of %llu blocks had not finished",
                (unsigned long long)(job.nblocks - done),
                (unsigned long long)job.nblocks);
  msg += buf;
  if (!job.error.empty()) msg += "; " + job.error;
  return msg;
}

}  // namespace attnbook_emu
