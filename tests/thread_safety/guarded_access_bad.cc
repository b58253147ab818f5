// Must FAIL under -Wthread-safety: reads and writes a GUARDED_BY member without its mutex.
#include "base/mutex.h"

namespace {

class Counter {
 public:
  void Bump() { ++count_; }  // wrong: mu_ is not held
  int Get() {
    strata::MutexLock lock(&mu_);
    return count_;
  }

 private:
  strata::Mutex mu_;
  int count_ GUARDED_BY(mu_) = 0;
};

}  // namespace

int main() {
  Counter c;
  c.Bump();
  return c.Get();
}
