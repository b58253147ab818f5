// MappedFile: a read-only memory map of a whole file.
//
// Ownership: the MappedFile owns the mapping; spans handed out stay valid while it lives.
// Thread-safety: immutable after Open(); safe to read from any thread.
// Errors: Open() returns NotFound / IoError naming the path; never throws.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "base/status.h"

namespace strata {

class MappedFile {
 public:
  static Result<std::unique_ptr<MappedFile>> Open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }
  // Drops the resident pages wholly inside [p, p + n) (a range of this mapping) from the
  // process's memory: a later read faults them in again from the file. For data the caller has
  // copied elsewhere (a repacked weight) and will not read again. Best effort; no-op outside.
  void ReleasePages(const void* p, size_t n) const;

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

// Reads a whole (small) file into a string. Refuses files larger than max_bytes.
Result<std::string> ReadFileToString(const std::string& path, size_t max_bytes = size_t{1} << 30);

}  // namespace strata
