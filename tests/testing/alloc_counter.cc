// Replaces global operator new for the runner test binary so a test can count heap allocations
// made while counting is on (kept in its own translation unit so the replacement is not inlined
// into callers). Test-only; never linked into a library.
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

namespace strata::testing {
std::atomic<bool> g_count_allocs{false};
std::atomic<size_t> g_allocs{0};
}  // namespace strata::testing

void* operator new(std::size_t n) {
  if (strata::testing::g_count_allocs.load(std::memory_order_relaxed))
    strata::testing::g_allocs.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
