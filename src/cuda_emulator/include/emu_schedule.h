// The emulator runtime's scheduler (see emu_runtime.h): the passes that run a
// block's threads between two synchronisation points, barriers and warp
// collectives.
#pragma once

#include "emu_blocks.h"
#include "emu_hooks.h"

namespace attnbook_emu {

// ---- scheduling ---------------------------------------------------------------------
// Between two synchronisation points each thread runs alone until it blocks or exits,
// then switches straight to the next thread of the pass that may run. A pass visits the
// threads in the block's order; threads freed during a pass (by a warp collective) run
// in it if the pass has not gone by them yet, in the next one otherwise, exactly as
// when a scheduler loop ran every pass. The last thread to arrive at a complete barrier
// releases it. A shuffle draws a new order for every pass.
inline void new_pass(Runtime& r) {
  r.pos = -1;
  r.progress->fetch_add(1, std::memory_order_relaxed);   // for the stall guard
  if (r.mode == Order::Shuffle)
    for (int i = r.nthreads - 1; i > 0; --i)
      std::swap(r.order[i], r.order[r.rng.below(i + 1)]);
}

inline Thread* scan(Runtime& r) {
  while (++r.pos < r.nthreads) {
    Thread* t = r.order[r.pos];
    if (t->state <= State::Runnable) return t;
  }
  return nullptr;
}

// Called when no thread can run and some have not finished: say why the block is stuck.
[[noreturn]] inline void diagnose(Runtime& r) {
  int waiting = 0, at_warp = 0, at_mbarrier = 0, mbarrier_line = 0, line = -1;
  const Thread* exited = nullptr;
  const Thread* other_line = nullptr;
  for (auto& t : r.threads) {
    if (t.state == State::AtMbarrier) {
      ++at_mbarrier;
      mbarrier_line = t.barrier_line;
    } else if (t.state == State::AtBarrier) {
      if (line < 0) line = t.barrier_line;
      else if (t.barrier_line != line && !other_line) other_line = &t;
      ++waiting;
    } else if (t.state == State::Done) {
      if (!exited) exited = &t;
    } else if (t.state == State::AtWarp) {
      ++at_warp;
    }
  }
  char block[160], buf[256];
  std::snprintf(block, sizeof block, "kernel '%s', block (%u,%u,%u): ", r.kernel,
                r.block_idx.x, r.block_idx.y, r.block_idx.z);
  if (at_mbarrier) {
    std::snprintf(buf, sizeof buf,
                  "deadlock: %d threads wait on an mbarrier (line %d) whose phase "
                  "cannot complete: an arrival or a transaction's bytes never come "
                  "(%d threads wait at __syncthreads, %d in warp collectives)",
                  at_mbarrier, mbarrier_line, waiting, at_warp);
    throw BlockError(block + std::string(buf));
  }
  if (waiting == 0) {
    std::snprintf(buf, sizeof buf,
                  "deadlock: %d threads wait in warp collectives that can never "
                  "complete (a lane of their mask exited or never arrives)", at_warp);
    throw BlockError(block + std::string(buf));
  }
  if (other_line) {
    std::snprintf(buf, sizeof buf,
                  "divergent barrier: threads wait at __syncthreads on line %d and on "
                  "line %d", line, other_line->barrier_line);
    throw BlockError(where(*other_line) + ": " + buf);
  }
  if (at_warp > 0) {
    std::snprintf(buf, sizeof buf,
                  "deadlock: %d threads wait at __syncthreads (line %d) while %d wait "
                  "in a warp collective", waiting, line, at_warp);
    throw BlockError(block + std::string(buf));
  }
  // Every thread waits on one line, yet the barrier was not released: some have exited.
  std::snprintf(buf, sizeof buf,
                "divergent barrier: %d threads wait at __syncthreads on line %d but "
                "this thread has exited", waiting, line);
  throw BlockError(where(*exited) + ": " + buf);
}

// The next thread to run: the rest of this pass, else a new pass; nullptr when every
// thread has finished. The caller has just run, so an empty new pass means a stuck
// block: nobody can run, yet not everybody has finished.
inline Thread* pick(Runtime& r) {
  if (Thread* t = scan(r)) return t;
  if (r.done == r.nthreads) return nullptr;
  new_pass(r);
  if (Thread* t = scan(r)) return t;
  diagnose(r);
}

// Save the running context in `from` and run `next`: resume it, or start it afresh.
inline void resume(Runtime& r, Context& from, Thread* next) {
  r.cur = next;
  if (next->state != State::Fresh) return Context::jump(from, next->ctx);
  next->state = State::Runnable;
  Context::start(from, next->ctx, stack_top(r, next->linear), r.fiber, next);
}

// Run `next` in place of `self`, which has just blocked; returns once `self` resumes.
inline void switch_to(Runtime& r, Thread* self, Thread* next) {
  if (next != self) resume(r, self->ctx, next);
}

// A fiber: runs thread `arg`, then any that have not started when it finishes. It calls
// the kernel itself (Closure is inlined here), not through a wrapper: a frame less.
template <class Closure>
void fiber_main(void* arg) {
  Runtime& r = rt();
  // A copy on this stack, which the checked build lets kernel code read (it is the
  // launching thread's otherwise).
  const Closure kernel = *static_cast<const Closure*>(r.closure);
  Thread* self = static_cast<Thread*>(arg);
  Thread* next = nullptr;
  try {
    for (;;) {
      if constexpr (kChecked) r.in_kernel = true;
      kernel();
      if constexpr (kChecked) r.in_kernel = false;
      self->state = State::Done;
      ++r.done;
      r.warps[self->linear / kWarp].exited |= 1u << (self->linear % kWarp);
      next = pick(r);
      // A thread that has not started owns nothing yet: rather than start it on a stack
      // of its own, run it here, on the stack of the thread that just finished (whose
      // frames are dead, and whose warp-collective data nobody reads any more: a
      // collective is complete before its lanes go on). A kernel without
      // synchronisation thus runs its threads as a plain loop.
      if (!next || next->state != State::Fresh) break;
      next->state = State::Runnable;
      r.cur = self = next;
    }
  } catch (const BlockError& e) {
    r.in_kernel = false;
    r.error = e.what();
    next = nullptr;
  } catch (const std::exception& e) {
    r.in_kernel = false;
    r.error = where(*self) + ": " + e.what();
    next = nullptr;
  } catch (...) {
    r.in_kernel = false;
    r.error = where(*self) + ": unknown exception";
    next = nullptr;
  }
  // This fiber is finished (or the block failed): it is never resumed.
  if (next) resume(r, self->ctx, next);
  else Context::jump(self->ctx, r.scheduler);
  __builtin_unreachable();
}

// ---- barriers -----------------------------------------------------------------------
// Wait until every thread of the block arrives; returns how many passed a non-zero
// `pred` (what __syncthreads_count/_and/_or report). As on a GPU (bar.sync 0), every
// __syncthreads is the same barrier: threads waiting on different lines release it
// together (a warp-specialised kernel does this); a thread that exits first is an
// error.
inline int syncthreads(int line, int pred = 0) {
  Runtime& r = rt();
  EmulatorCode guard(r);
  Thread* self = r.cur;
  self->state = State::AtBarrier;
  self->pred = pred != 0;
  self->barrier_line = line;
  Thread* next;
  if (++r.arrived < r.nthreads) {
    next = pick(r);
  } else {
    // One result for the block: no thread can reach the next barrier, let alone
    // complete it, before every thread has resumed from this one and read it.
    int count = 0;
    for (auto& t : r.threads) {
      t.state = State::Runnable;
      count += t.pred;
    }
    r.sync_result = count;
    r.arrived = 0;
    on_barrier(r);
    new_pass(r);
    next = scan(r);
  }
  switch_to(r, self, next);
  return r.sync_result;
}

// ---- warp collectives ---------------------------------------------------------------
inline uint32_t existing_lanes(int warp) { return rt().warps[warp].lanes; }

inline void warp_collective(uint32_t mask, int line, void* data, WarpFn fn) {
  Runtime& r = rt();
  EmulatorCode guard(r);
  Thread* self = r.cur;
  int w = self->linear / kWarp, lane = self->linear % kWarp;
  Warp& warp = r.warps[w];
  uint32_t group = mask & warp.lanes;
  if (!(group & (1u << lane))) {
    char buf[128];
    std::snprintf(buf, sizeof buf,
                  "warp collective on line %d: mask 0x%08x excludes the calling "
                  "lane %d",
                  line, mask, lane);
    fail(buf);
  }
  warp.mask[lane] = mask;
  warp.fn[lane] = fn;
  warp.data[lane] = data;
  warp.line[lane] = line;
  warp.arrived |= 1u << lane;
  if (uint32_t gone = group & warp.exited) {
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  "warp collective on line %d: lane %d of mask 0x%08x has exited", line,
                  __builtin_ctz(gone), mask);
    fail(buf);
  }
  if ((warp.arrived & group) != group) {
    self->state = State::AtWarp;
    switch_to(r, self, pick(r));
    return;
  }
  for (int l = 0; l < kWarp; ++l) {
    if (!(group & (1u << l))) continue;
    if (warp.mask[l] != mask || warp.fn[l] != fn) {
      char buf[200];
      std::snprintf(buf, sizeof buf,
                    "mismatched warp collectives: lane %d (line %d, mask 0x%08x) "
                    "and lane %d (line %d, mask 0x%08x)",
                    lane, line, mask, l, warp.line[l], warp.mask[l]);
      fail(buf);
    }
  }
  fn(warp.data + 0, group);   // lane_data indexed by lane
  warp.arrived &= ~group;
  on_warp_sync(r, w, group);
  for (int l = 0; l < kWarp; ++l)
    if ((group & (1u << l)) && l != lane)
      r.threads[w * kWarp + l].state = State::Runnable;
}

}  // namespace attnbook_emu
