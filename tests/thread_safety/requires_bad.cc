// Must FAIL under -Wthread-safety: calls a REQUIRES(mu_) function without holding mu_, and waits
// on a CondVar without the mutex.
#include "base/mutex.h"

namespace {

class Queue {
 public:
  void Push() {
    PushLocked();  // wrong: mu_ is not held
  }
  void Wait() {
    cv_.Wait(&mu_);  // wrong: mu_ is not held
  }

 private:
  void PushLocked() REQUIRES(mu_) { ++size_; }
  strata::Mutex mu_;
  strata::CondVar cv_;
  int size_ GUARDED_BY(mu_) = 0;
};

}  // namespace

int main() {
  Queue q;
  q.Push();
  return 0;
}
