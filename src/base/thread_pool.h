// ThreadPool: a fixed set of worker threads that run one parallel loop at a time.
//
// Threads are created once (no per-op thread creation). ParallelFor splits [0, n) into
// `num_threads()` contiguous chunks; chunk i always runs the same index range, so work split by
// rows gives results independent of the thread count (each output element is computed by exactly
// one thread with the same code path).
// Thread contract: ParallelFor must be called from one thread at a time (the owner, e.g. the engine
// thread); it blocks until every chunk is done. The calling thread runs chunk 0 itself.
// Waiting: a worker that finished a job, and the owner waiting for its workers, first spin for a
// bounded time (kSpinIterations pauses, ~0.1 ms) and then sleep on a condition variable. A decode
// step dispatches ~150 short jobs; waking a sleeping thread costs a futex call and, on a VM, an
// idle vCPU's wake-up, so keeping the workers awake between the jobs of a step saves that each time
// while an idle pool still sleeps. A pool with more threads than the machine has hardware
// threads does not spin (a spinning thread would hold a core that another one needs).
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <thread>
#include <type_traits>
#include <vector>

#include "base/mutex.h"

namespace strata {

class ThreadPool {
 public:
  // num_threads >= 1 (values < 1 are treated as 1). num_threads - 1 workers are started.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // fn(begin, end, thread_index) over a partition of [0, n) into at most num_threads() chunks,
  // with chunk boundaries rounded to multiples of `grain` (>= 1). `fn` is any callable; it is
  // called by reference (never copied or type-erased into an allocating wrapper), so a call
  // performs no heap allocation.
  template <typename F>
  void ParallelFor(size_t n, F&& fn, size_t grain = 1) {
    ParallelForImpl(n, grain, Erase(fn), [](void* f, size_t b, size_t e, int t) {
      (*static_cast<std::remove_reference_t<F>*>(f))(b, e, t);
    });
  }

  // fn(thread_index) once on every thread (e.g. to reduce per-thread partial results).
  template <typename F>
  void RunOnAll(F&& fn) {
    RunOnAllImpl(Erase(fn),
                 [](void* f, int t) { (*static_cast<std::remove_reference_t<F>*>(f))(t); });
  }

 private:
  using Thunk = void (*)(void*, int);
  using RangeThunk = void (*)(void*, size_t, size_t, int);
  template <typename T>
  static void* Erase(T& obj) {
    return const_cast<void*>(static_cast<const void*>(std::addressof(obj)));
  }
  void RunOnAllImpl(void* obj, Thunk thunk) EXCLUDES(mu_);
  void ParallelForImpl(size_t n, size_t grain, void* obj, RangeThunk thunk) EXCLUDES(mu_);
  void WorkerLoop(int index) EXCLUDES(mu_);

  static constexpr int kSpinIterations = 2000;

  int num_threads_;
  int spin_iterations_;  // kSpinIterations, or 0 when oversubscribed
  std::vector<std::thread> workers_;
  Mutex mu_;
  CondVar cv_start_;
  CondVar cv_done_;
  // The job: written by the owner before generation_ is bumped (release), read by workers after
  // they see the new generation (acquire).
  void* job_obj_ = nullptr;
  Thunk job_thunk_ = nullptr;
  std::atomic<uint64_t> generation_{0};  // bumped under mu_, so a sleeping worker cannot miss it
  std::atomic<int> pending_{0};          // workers still running the current job
  std::atomic<bool> stop_{false};        // set under mu_
  int sleepers_ GUARDED_BY(mu_) = 0;     // workers waiting on cv_start_
  bool owner_sleeping_ GUARDED_BY(mu_) = false;  // the owner waiting on cv_done_
};

// Default thread count: hardware concurrency (at least 1).
int DefaultThreadCount();

}  // namespace strata
