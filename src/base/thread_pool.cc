#include "base/thread_pool.h"

#include <algorithm>

namespace strata {

int DefaultThreadCount() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_start_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    void* obj;
    Thunk thunk;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      obj = job_obj_;
      thunk = job_thunk_;
    }
    thunk(obj, index);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) cv_done_.notify_one();
    }
  }
}

void ThreadPool::RunOnAllImpl(void* obj, Thunk thunk) {
  if (num_threads_ == 1) {
    thunk(obj, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_obj_ = obj;
    job_thunk_ = thunk;
    pending_ = num_threads_ - 1;
    ++generation_;
  }
  cv_start_.notify_all();
  thunk(obj, 0);
  std::unique_lock<std::mutex> lock(mu_);
  cv_done_.wait(lock, [&] { return pending_ == 0; });
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
