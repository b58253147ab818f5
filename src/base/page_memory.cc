#include "base/page_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <string>
#include <utility>

namespace strata {

PageMemory::~PageMemory() { Release(); }

PageMemory::PageMemory(PageMemory&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

PageMemory& PageMemory::operator=(PageMemory&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void PageMemory::Release() {
  if (data_ != nullptr) munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

Result<PageMemory> PageMemory::Allocate(uint64_t bytes) {
  const long page_size = sysconf(_SC_PAGESIZE);
  const uint64_t page = page_size > 0 ? static_cast<uint64_t>(page_size) : 4096;
  // Refuse what cannot be mapped before the arithmetic below could wrap.
  if (bytes == 0 || bytes > (uint64_t{1} << 62)) {
    return Status::ResourceExhausted("cannot map " + std::to_string(bytes) + " bytes");
  }
  const size_t size = static_cast<size_t>((bytes + page - 1) / page * page);
  // Map kAlign more than asked, then trim the unaligned head and the tail past `size`.
  const size_t span = size + kAlign;
  void* p = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return Status::ResourceExhausted("cannot map " + std::to_string(bytes) +
                                     " bytes of anonymous memory");
  }
  auto* base = static_cast<uint8_t*>(p);
  const uintptr_t addr = reinterpret_cast<uintptr_t>(base);
  uint8_t* data = base + ((kAlign - addr % kAlign) % kAlign);
  if (data > base) munmap(base, static_cast<size_t>(data - base));
  uint8_t* end = data + size;
  if (end < base + span) munmap(end, static_cast<size_t>(base + span - end));
#ifdef MADV_HUGEPAGE
  (void)madvise(data, size, MADV_HUGEPAGE);  // a hint: refused where THP is off
#endif
  return PageMemory(data, size);
}

}  // namespace strata
