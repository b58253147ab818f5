#include "base/thread_pool.h"

#include <pthread.h>

#include <algorithm>

namespace strata {

int DefaultThreadCount() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

ThreadPool::ThreadPool(int num_threads)
    : num_threads_(std::max(1, num_threads)),
      spin_iterations_(num_threads_ <= DefaultThreadCount() ? kSpinIterations : 0) {
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    MutexLock lock(&mu_);
    stop_.store(true, std::memory_order_release);
  }
  cv_start_.NotifyAll();
  for (auto& t : workers_) t.join();
}

namespace {
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}
}  // namespace

void ThreadPool::WorkerLoop(int index) {
  pthread_setname_np(pthread_self(), "strata-pool");  // for per-thread tools (top -H)
  uint64_t seen = 0;
  for (;;) {
    bool ready = false;
    for (int i = 0; i < spin_iterations_ && !ready; ++i) {
      ready = generation_.load(std::memory_order_acquire) != seen ||
              stop_.load(std::memory_order_acquire);
      if (!ready) CpuRelax();
    }
    if (!ready) {
      MutexLock lock(&mu_);
      ++sleepers_;
      while (!stop_.load(std::memory_order_acquire) &&
             generation_.load(std::memory_order_acquire) == seen) {
        cv_start_.Wait(&mu_);
      }
      --sleepers_;
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen = generation_.load(std::memory_order_acquire);
    job_thunk_(job_obj_, index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      MutexLock lock(&mu_);  // the owner checks its predicate under mu_
      if (owner_sleeping_) cv_done_.NotifyOne();
    }
  }
}

void ThreadPool::RunOnAllImpl(void* obj, Thunk thunk) {
  if (num_threads_ == 1) {
    thunk(obj, 0);
    return;
  }
  job_obj_ = obj;
  job_thunk_ = thunk;
  pending_.store(num_threads_ - 1, std::memory_order_relaxed);
  {
    MutexLock lock(&mu_);
    generation_.fetch_add(1, std::memory_order_release);
    if (sleepers_ > 0) cv_start_.NotifyAll();
  }
  thunk(obj, 0);
  for (int i = 0; i < spin_iterations_ && pending_.load(std::memory_order_acquire) != 0; ++i)
    CpuRelax();
  if (pending_.load(std::memory_order_acquire) != 0) {
    MutexLock lock(&mu_);
    owner_sleeping_ = true;
    while (pending_.load(std::memory_order_acquire) != 0) cv_done_.Wait(&mu_);
    owner_sleeping_ = false;
  }
  job_obj_ = nullptr;
  job_thunk_ = nullptr;
}

void ThreadPool::ParallelForImpl(size_t n, size_t grain, void* obj, RangeThunk thunk) {
  if (n == 0) return;
  grain = std::max<size_t>(1, grain);
  size_t units = (n + grain - 1) / grain;
  size_t chunks = std::min<size_t>(static_cast<size_t>(num_threads_), units);
  if (chunks <= 1) {
    thunk(obj, 0, n, 0);
    return;
  }
  auto body = [&](int t) {
    size_t ti = static_cast<size_t>(t);
    if (ti >= chunks) return;
    size_t u0 = units * ti / chunks, u1 = units * (ti + 1) / chunks;
    size_t b = std::min(n, u0 * grain), e = std::min(n, u1 * grain);
    if (b < e) thunk(obj, b, e, t);
  };
  RunOnAll(body);
}

}  // namespace strata
