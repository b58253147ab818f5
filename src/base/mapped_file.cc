#include "base/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace strata {

Result<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) return Status::NotFound("no such file: " + path);
    return Status::IoError("cannot open " + path + ": " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return Status::IoError("cannot stat " + path + ": " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::InvalidArgument("not a regular file: " + path);
  }
  std::unique_ptr<MappedFile> f(new MappedFile());
  f->path_ = path;
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ > 0) {
    void* p = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return Status::IoError("cannot mmap " + path + ": " + std::strerror(err));
    }
    f->data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return f;
}

void MappedFile::ReleasePages(const void* p, size_t n) const {
  const auto begin = reinterpret_cast<uintptr_t>(p), end = begin + n;
  const auto lo = reinterpret_cast<uintptr_t>(data_), hi = lo + size_;
  if (data_ == nullptr || begin < lo || end > hi || n == 0) return;
  // Offsets from the mapping's start, which mmap aligned to a page.
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t first = (begin - lo + page - 1) / page * page, last = (end - lo) / page * page;
  if (first < last) ::madvise(const_cast<uint8_t*>(data_) + first, last - first, MADV_DONTNEED);
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

Result<std::string> ReadFileToString(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot open " + path);
  in.seekg(0, std::ios::end);
  auto size = static_cast<long long>(in.tellg());
  if (size < 0) return Status::IoError("cannot size " + path);
  if (static_cast<unsigned long long>(size) > max_bytes)
    return Status::InvalidArgument(path + " is larger than the limit of " +
                                   std::to_string(max_bytes) + " bytes");
  in.seekg(0);
  std::string s(static_cast<size_t>(size), '\0');
  in.read(s.data(), size);
  if (!in) return Status::IoError("short read on " + path);
  return s;
}

}  // namespace strata
