#include "engine/kvtier/disk_tier.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "engine/kvtier/block_codec.h"

namespace strata::engine::kvtier {
namespace {

std::string ErrnoText() { return std::strerror(errno); }

bool IsHex(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool ParseHexKey(std::string_view hex, BlockKey* key) {
  if (hex.size() != 64 || !IsHex(hex)) return false;
  auto nib = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  for (size_t i = 0; i < 32; ++i)
    (*key)[i] = static_cast<uint8_t>(nib(hex[2 * i]) << 4 | nib(hex[2 * i + 1]));
  return true;
}

Status MakeDir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) == 0 || errno == EEXIST) {
    struct stat st;
    if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return Status::Ok();
    return Status::IoError("kv disk tier: " + path + " is not a directory");
  }
  return Status::IoError("kv disk tier: cannot create " + path + ": " + ErrnoText());
}

Status MakeDirs(const std::string& path) {
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos == path.size() || path[pos] == '/') RETURN_IF_ERROR(MakeDir(path.substr(0, pos)));
  }
  return Status::Ok();
}

void FsyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

bool WriteAll(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Reads up to n bytes at offset 0; returns the count read or -1.
ssize_t ReadUpTo(int fd, uint8_t* p, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::pread(fd, p + got, n - got, static_cast<off_t>(got));
    if (r < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return static_cast<ssize_t>(got);
}

double MtimeSeconds(const struct stat& st) {
  return static_cast<double>(st.st_mtim.tv_sec) + static_cast<double>(st.st_mtim.tv_nsec) * 1e-9;
}

}  // namespace

DiskTier::DiskTier(const DiskTierConfig& config, uint64_t max_entry_bytes, Clock clock,
                   KeyObserver observer)
    : dir_(config.dir),
      fsync_(config.fsync),
      max_entry_bytes_(max_entry_bytes),
      clock_(std::move(clock)),
      index_(config.limits) {
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
  MutexLock lock(&mu_);
  index_.SetObserver(std::move(observer));
}

Result<std::unique_ptr<DiskTier>> DiskTier::Open(const DiskTierConfig& config,
                                                 uint64_t max_entry_bytes, Clock clock,
                                                 KeyObserver observer) {
  if (config.dir.empty()) return Status::InvalidArgument("disk.dir: empty");
  std::unique_ptr<DiskTier> tier(
      new DiskTier(config, max_entry_bytes, std::move(clock), std::move(observer)));
  RETURN_IF_ERROR(MakeDirs(tier->dir_));
  if (::access(tier->dir_.c_str(), R_OK | W_OK | X_OK) != 0) {
    return Status::IoError("kv disk tier: " + tier->dir_ + " is not writable: " + ErrnoText());
  }
  RETURN_IF_ERROR(tier->Scan());
  return tier;
}

std::string DiskTier::PathFor(const BlockKey& key) const {
  std::string hex = KeyHex(key);
  return dir_ + "/" + hex.substr(0, 2) + "/" + hex + ".kvb";
}

Status DiskTier::Scan() {
  struct Found {
    BlockKey key;
    std::string tenant;
    uint64_t size;
    double mtime;
  };
  std::vector<Found> found;
  DIR* top = ::opendir(dir_.c_str());
  if (top == nullptr)
    return Status::IoError("kv disk tier: cannot read " + dir_ + ": " + ErrnoText());
  std::vector<std::string> subdirs;
  while (dirent* d = ::readdir(top)) {
    std::string name = d->d_name;
    if (name.size() == 2 && IsHex(name)) subdirs.push_back(name);
  }
  ::closedir(top);
  std::vector<uint8_t> prefix(kEntryHeaderBytes + kMaxTenantBytes);
  for (const std::string& sub : subdirs) {
    std::string subdir = dir_ + "/" + sub;
    DIR* dd = ::opendir(subdir.c_str());
    if (dd == nullptr) continue;
    std::vector<std::string> names;
    while (dirent* d = ::readdir(dd)) names.emplace_back(d->d_name);
    ::closedir(dd);
    for (const std::string& name : names) {
      std::string path = subdir + "/" + name;
      if (name.rfind(".tmp-", 0) == 0) {  // a write that never completed
        ::unlink(path.c_str());
        continue;
      }
      BlockKey key;
      if (name.size() != 68 || name.compare(64, 4, ".kvb") != 0 || name.compare(0, 2, sub) != 0 ||
          !ParseHexKey(std::string_view(name).substr(0, 64), &key)) {
        continue;  // not ours
      }
      int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;
      struct stat st;
      bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
      ssize_t n = ok ? ReadUpTo(fd, prefix.data(), prefix.size()) : -1;
      ::close(fd);
      if (!ok || n < 0) continue;
      auto meta = ParseEntryHeader(std::span<const uint8_t>(prefix.data(), static_cast<size_t>(n)),
                                   static_cast<uint64_t>(st.st_size));
      if (!meta.ok() || meta->key != key || static_cast<uint64_t>(st.st_size) > max_entry_bytes_) {
        counters_.corrupt.fetch_add(1, std::memory_order_relaxed);
        ::unlink(path.c_str());
        continue;
      }
      found.push_back({key, meta->tenant, static_cast<uint64_t>(st.st_size), MtimeSeconds(st)});
    }
  }
  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return a.mtime < b.mtime; });
  MutexLock lock(&mu_);
  for (Found& f : found) {
    for (auto& r : index_.Insert({f.key, std::move(f.tenant), f.size, f.mtime, 0})) {
      if (r.reason != RemoveReason::kTooLarge)
        counters_.evictions.fetch_add(1, std::memory_order_relaxed);
      std::string path = PathFor(r.entry.key);
      ::unlink(path.c_str());
    }
  }
  return Status::Ok();
}

void DiskTier::RemoveFileLocked(const BlockKey& key) {
  std::string path = PathFor(key);
  ::unlink(path.c_str());
}

Status DiskTier::Put(const BlockKey& key, const std::string& tenant,
                     const std::vector<uint8_t>& entry) {
  OpTimer timer(&counters_.write_ops, &counters_.write_ns);
  std::string hex = KeyHex(key);
  std::string subdir = dir_ + "/" + hex.substr(0, 2);
  std::string final_path = subdir + "/" + hex + ".kvb";
  std::string temp_path = subdir + "/.tmp-" + std::to_string(::getpid()) + "-" +
                          std::to_string(temp_counter_.fetch_add(1, std::memory_order_relaxed));
  auto fail = [&](const std::string& what) {
    counters_.errors.fetch_add(1, std::memory_order_relaxed);
    ::unlink(temp_path.c_str());
    return Status::IoError("kv disk tier: " + what + " " + temp_path + ": " + ErrnoText());
  };
  if (Status s = MakeDir(subdir); !s.ok()) {
    counters_.errors.fetch_add(1, std::memory_order_relaxed);
    return s;
  }
  int fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return fail("cannot create");
  if (!WriteAll(fd, entry.data(), entry.size())) {
    ::close(fd);
    return fail("cannot write");
  }
  if (fsync_ && ::fsync(fd) != 0) {
    ::close(fd);
    return fail("cannot fsync");
  }
  if (::close(fd) != 0) return fail("cannot close");
  {
    MutexLock lock(&mu_);
    if (::rename(temp_path.c_str(), final_path.c_str()) != 0) return fail("cannot rename");
    bool stored = true;
    for (auto& r : index_.Insert({key, tenant, entry.size(), clock_(), 0})) {
      if (r.reason == RemoveReason::kTooLarge)
        stored = false;
      else
        counters_.evictions.fetch_add(1, std::memory_order_relaxed);
      RemoveFileLocked(r.entry.key);
    }
    if (stored)
      counters_.bytes_in.fetch_add(static_cast<int64_t>(entry.size()), std::memory_order_relaxed);
  }
  if (fsync_) FsyncDir(subdir);
  return Status::Ok();
}

std::optional<std::vector<uint8_t>> DiskTier::Get(const BlockKey& key) {
  OpTimer timer(&counters_.read_ops, &counters_.read_ns);
  auto miss = [&] {
    counters_.misses.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  };
  {
    MutexLock lock(&mu_);
    std::optional<PolicyIndex<char>::Entry> expired;
    if (index_.Find(key, clock_(), &expired) == nullptr) {
      if (expired) {
        counters_.expirations.fetch_add(1, std::memory_order_relaxed);
        RemoveFileLocked(key);
      }
      return miss();
    }
  }
  std::string path = PathFor(key);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno != ENOENT) counters_.errors.fetch_add(1, std::memory_order_relaxed);
    MutexLock lock(&mu_);
    index_.Erase(key);
    return miss();
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    counters_.errors.fetch_add(1, std::memory_order_relaxed);
    return miss();
  }
  if (static_cast<uint64_t>(st.st_size) > max_entry_bytes_) {
    ::close(fd);
    EraseCorrupt(key);
    return std::nullopt;
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(st.st_size));
  ssize_t n = ReadUpTo(fd, bytes.data(), bytes.size());
  ::close(fd);
  if (n < 0) {
    counters_.errors.fetch_add(1, std::memory_order_relaxed);
    return miss();
  }
  bytes.resize(static_cast<size_t>(n));  // a concurrently truncated file fails verification
  return bytes;
}

void DiskTier::EraseCorrupt(const BlockKey& key) {
  counters_.CountCorrupt();
  MutexLock lock(&mu_);
  index_.Erase(key);
  RemoveFileLocked(key);
}

void DiskTier::SweepExpired() {
  MutexLock lock(&mu_);
  for (const auto& e : index_.SweepExpired(clock_())) {
    counters_.expirations.fetch_add(1, std::memory_order_relaxed);
    RemoveFileLocked(e.key);
  }
}

bool DiskTier::Contains(const BlockKey& key) const {
  MutexLock lock(&mu_);
  return index_.Contains(key);
}

TierStats DiskTier::Stats() const {
  MutexLock lock(&mu_);
  return counters_.Snapshot("disk", index_.size(), index_.bytes());
}

}  // namespace strata::engine::kvtier
