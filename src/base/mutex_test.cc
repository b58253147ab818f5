#include "base/mutex.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace strata {
namespace {

// True when another thread can take `mu` right now.
bool FreeFromOtherThread(Mutex& mu) {
  bool got = false;
  std::thread t([&] {
    if (mu.TryLock()) {
      got = true;
      mu.Unlock();
    }
  });
  t.join();
  return got;
}

TEST(MutexTest, MutexLockHoldsForItsScope) {
  Mutex mu;
  {
    MutexLock lock(&mu);
    EXPECT_FALSE(FreeFromOtherThread(mu));
  }
  EXPECT_TRUE(FreeFromOtherThread(mu));
}

TEST(MutexTest, MutexLockUnlockAndRelock) {
  Mutex mu;
  {
    MutexLock lock(&mu);
    lock.Unlock();
    EXPECT_TRUE(FreeFromOtherThread(mu));
    lock.Lock();
    EXPECT_FALSE(FreeFromOtherThread(mu));
  }
  EXPECT_TRUE(FreeFromOtherThread(mu));
  {
    MutexLock lock(&mu);
    lock.Unlock();  // the destructor must not unlock a second time
  }
  EXPECT_TRUE(FreeFromOtherThread(mu));
}

TEST(MutexTest, NativeIsTheSameMutex) {
  Mutex mu;
  std::lock_guard<std::mutex> lock(mu.native());
  EXPECT_FALSE(FreeFromOtherThread(mu));
}

TEST(CondVarTest, WaitWakesOnNotifyWithTheMutexHeld) {
  Mutex mu;
  CondVar cv;
  bool ready = false;
  std::thread t([&] {
    MutexLock lock(&mu);
    ready = true;
    cv.NotifyOne();
  });
  {
    MutexLock lock(&mu);
    while (!ready) cv.Wait(&mu);
    EXPECT_FALSE(FreeFromOtherThread(mu));  // held again after the wait
  }
  t.join();
  EXPECT_TRUE(FreeFromOtherThread(mu));
}

TEST(CondVarTest, TimedWaitsReportTimeoutAndWakeUp) {
  Mutex mu;
  CondVar cv;
  {
    MutexLock lock(&mu);
    auto t0 = std::chrono::steady_clock::now();
    bool woken = true;
    // Spurious wake-ups are allowed: loop until the timeout is reported.
    while (woken) woken = cv.WaitFor(&mu, std::chrono::milliseconds(5));
    EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(5));
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(5);
    while (cv.WaitUntil(&mu, deadline)) {
    }
    EXPECT_GE(std::chrono::steady_clock::now(), deadline);
    EXPECT_FALSE(FreeFromOtherThread(mu));
  }
  bool ready = false;
  std::thread t([&] {
    MutexLock lock(&mu);
    ready = true;
    cv.NotifyAll();
  });
  {
    MutexLock lock(&mu);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!ready && cv.WaitUntil(&mu, deadline)) {
    }
    EXPECT_TRUE(ready);
  }
  t.join();
}

}  // namespace
}  // namespace strata
