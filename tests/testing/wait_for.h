// WaitFor: polls a condition every 100 ms until it holds or `timeout_s` passes; for tests that
// wait on real processes (a replica ready, Prometheus scraping) on a loaded machine.
// Returns the condition's last value. Thread contract: runs `cond` on the calling thread.
#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace strata::testing {

inline bool WaitFor(const std::function<bool()>& cond, double timeout_s) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < until) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return cond();
}

}  // namespace strata::testing
