// Must compile under -Wthread-safety: the shapes of the *_bad.cc probes written correctly, plus
// the escape hatches of base/mutex.h (MutexLock::Unlock/Lock, CondVar waits, AssertHeld).
#include <chrono>

#include "base/mutex.h"

namespace {

class Queue {
 public:
  void Push() EXCLUDES(mu_) {
    {
      strata::MutexLock lock(&mu_);
      PushLocked();
    }
    cv_.NotifyOne();
  }
  bool PopFor(std::chrono::milliseconds timeout) EXCLUDES(mu_) {
    strata::MutexLock lock(&mu_);
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (size_ == 0) {
      if (!cv_.WaitUntil(&mu_, deadline)) break;
    }
    if (size_ == 0) return false;
    --size_;
    lock.Unlock();
    Work();  // outside the lock
    lock.Lock();
    ++popped_;
    return true;
  }
  int PoppedViaNative() EXCLUDES(mu_) {
    std::lock_guard<std::mutex> lock(mu_.native());
    mu_.AssertHeld();  // the analysis cannot see a std::lock_guard over native()
    return popped_;
  }

 private:
  void PushLocked() REQUIRES(mu_) { ++size_; }
  static void Work() {}
  strata::Mutex mu_;
  strata::CondVar cv_;
  int size_ GUARDED_BY(mu_) = 0;
  int popped_ GUARDED_BY(mu_) = 0;
};

}  // namespace

int main() {
  Queue q;
  q.Push();
  bool ok = q.PopFor(std::chrono::milliseconds(1));
  return ok && q.PoppedViaNative() == 1 ? 0 : 1;
}
