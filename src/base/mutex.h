// Mutex, MutexLock, CondVar: std::mutex and std::condition_variable as capabilities that clang's
// thread-safety analysis understands (base/thread_annotations.h).
//
// Owns: nothing but the wrapping. Every member is an inline one-line forward to the std type, so
// a Mutex costs exactly what a std::mutex costs, and behaviour (fairness, spurious wake-ups,
// timeouts) is that of the standard library.
// Thread safety: the same as std::mutex / std::condition_variable.
// Errors: none (std::system_error from the standard library is not caught, as before).
//
//   Mutex mu_;
//   CondVar cv_;
//   std::deque<Job> queue_ GUARDED_BY(mu_);
//
//   void Push(Job j) EXCLUDES(mu_) {
//     { MutexLock lock(&mu_); queue_.push_back(std::move(j)); }
//     cv_.NotifyOne();
//   }
//   Job Pop() EXCLUDES(mu_) {
//     MutexLock lock(&mu_);
//     while (queue_.empty()) cv_.Wait(&mu_);   // a loop, not a predicate lambda: see below
//     ...
//   }
//
// Waiting: write `while (!condition) cv.Wait(&mu);` rather than passing a predicate lambda. A
// lambda is a separate function to the analysis, which does not know that the wait calls it with
// the mutex held, so every guarded member it reads would be reported. The loop is exactly what
// std::condition_variable::wait(lock, pred) does.
//
// Escape hatches: `native()` returns the std::mutex for an API that needs one (e.g.
// std::condition_variable_any, or a std::unique_lock handed to foreign code); the analysis then
// cannot see the locking, so call `AssertHeld()` where the mutex is known to be held.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "base/thread_annotations.h"

namespace strata {

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  bool TryLock() TRY_ACQUIRE(true) { return mu_.try_lock(); }

  // Tells the analysis that the calling thread holds this mutex (no run-time check: std::mutex
  // has no owner query). For code reached through native() or a callback the analysis cannot
  // follow.
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

  // The underlying std::mutex. Locking through it is invisible to the analysis.
  std::mutex& native() RETURN_CAPABILITY(this) { return mu_; }

 private:
  std::mutex mu_;
};

// Holds a Mutex for its scope. Unlock()/Lock() release and re-take it inside the scope (the
// destructor releases only if held).
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() RELEASE() {
    if (held_) mu_->Unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() RELEASE() {
    mu_->Unlock();
    held_ = false;
  }
  void Lock() ACQUIRE() {
    mu_->Lock();
    held_ = true;
  }

 private:
  Mutex* mu_;
  bool held_ = true;
};

// std::condition_variable over a Mutex. Every wait requires the mutex held and returns with it
// held; wake-ups may be spurious (wait in a loop on the condition).
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  void Wait(Mutex* mu) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->native(), std::adopt_lock);
    cv_.wait(lock);
    lock.release();  // still held: ownership goes back to the caller's MutexLock
  }

  // Returns false when `deadline` passed (the caller re-checks its condition either way).
  template <typename Clock, typename Duration>
  bool WaitUntil(Mutex* mu, const std::chrono::time_point<Clock, Duration>& deadline) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->native(), std::adopt_lock);
    bool woken = cv_.wait_until(lock, deadline) == std::cv_status::no_timeout;
    lock.release();
    return woken;
  }

  // Returns false when `timeout` elapsed. A wait until steady now + `timeout`, which is what the
  // standard defines std::condition_variable::wait_for to be.
  template <typename Rep, typename Period>
  bool WaitFor(Mutex* mu, const std::chrono::duration<Rep, Period>& timeout) REQUIRES(mu) {
    return WaitUntil(mu, std::chrono::steady_clock::now() + timeout);
  }

  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace strata
