// Large anonymous memory for long-lived buffers that are streamed or walked in full (repacked model
// weights, the KV cache), on transparent huge pages where the kernel allows.
//
// Why huge pages: a decode step streams every weight byte once; with 4 KiB pages that is a TLB
// miss per 64 cache lines, and the hardware prefetchers stop at every 4 KiB boundary. On a VM a
// 4 KiB page fault is also expensive: filling 2 GiB of repacked weights took ~11 s in 4 KiB faults
// against ~2 s in 2 MiB ones (AMD Zen 5 guest, docs/perf.md).
//
// Ownership: PageMemory owns its mapping and unmaps it on destruction; move-only. Threads: the
// object is not synchronised; the bytes are plain memory. Errors: Allocate returns
// kResourceExhausted naming the size when the mapping fails. The huge-page advice is a hint:
// where THP is off ("never") the memory is the same, on 4 KiB pages.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/status.h"

namespace strata {

class PageMemory {
 public:
  // Alignment of the mapping's start: a transparent huge page's size on x86-64.
  static constexpr size_t kAlign = size_t{2} << 20;

  PageMemory() = default;
  ~PageMemory();
  PageMemory(PageMemory&& other) noexcept;
  PageMemory& operator=(PageMemory&& other) noexcept;
  PageMemory(const PageMemory&) = delete;
  PageMemory& operator=(const PageMemory&) = delete;

  // `bytes` (> 0) of zeroed memory starting on a kAlign boundary, advised MADV_HUGEPAGE. Untouched
  // pages cost nothing; the mapping is rounded up to whole 4 KiB pages.
  static Result<PageMemory> Allocate(uint64_t bytes);

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }  // the mapped bytes (>= the request)
  explicit operator bool() const { return data_ != nullptr; }

 private:
  PageMemory(uint8_t* data, size_t size) : data_(data), size_(size) {}
  void Release();
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace strata
