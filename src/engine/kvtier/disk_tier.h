// DiskTier (L3): encoded entries as files <dir>/<first 2 hex>/<64 hex>.kvb under a PolicyIndex.
//
// Crash safety: a Put writes a unique temp file (".tmp-<pid>-<counter>") in the target directory,
// fsyncs it (when configured), renames it over the final name and fsyncs the directory, so a
// reader sees either the old entry, the new one, or none — never a torn file. Open() scans the
// directory, deletes temp files left by a crash, and rebuilds the index from the *.kvb files
// (size; mtime = written time, oldest = least recently used; tenant from the header). Entries are
// fully verified only when read; the caller reports bad ones through EraseCorrupt (file deleted).
// Capacity counts file sizes.
// Thread contract: thread-safe. File writes and reads run outside the index mutex; the rename into
// place and unlinks of evicted files run under it, so an eviction never deletes a newer file.
// Errors: Open() → IoError when the directory can't be created or read; per-entry I/O errors are
// counted (errors) and the entry is a miss / not stored.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "engine/kvtier/tier_policy.h"

namespace strata::engine::kvtier {

class DiskTier {
 public:
  // `max_entry_bytes`: files larger than this are treated as corrupt (never read into memory).
  // `observer` (may be empty) hears every key entering or leaving the tier, from the startup scan
  // on (tier_policy.h).
  static Result<std::unique_ptr<DiskTier>> Open(const DiskTierConfig& config,
                                                uint64_t max_entry_bytes, Clock clock,
                                                KeyObserver observer = {});

  // Stores one encoded entry (atomically replacing an existing one).
  Status Put(const BlockKey& key, const std::string& tenant, const std::vector<uint8_t>& entry);
  // The file's bytes, or nullopt (miss, expired, unreadable; counted). Hits are counted by the
  // caller once the bytes decode (counters().CountHit).
  std::optional<std::vector<uint8_t>> Get(const BlockKey& key);
  void EraseCorrupt(const BlockKey& key);
  void SweepExpired();
  bool Contains(const BlockKey& key) const;
  TierStats Stats() const;
  TierCounters& counters() { return counters_; }

  std::string PathFor(const BlockKey& key) const;  // for tests and tools
  const std::string& dir() const { return dir_; }

 private:
  DiskTier(const DiskTierConfig& config, uint64_t max_entry_bytes, Clock clock,
           KeyObserver observer);
  Status Scan();
  void RemoveFileLocked(const BlockKey& key) REQUIRES(mu_);

  std::string dir_;
  bool fsync_;
  uint64_t max_entry_bytes_;
  Clock clock_;
  std::atomic<uint64_t> temp_counter_{0};
  mutable Mutex mu_;
  PolicyIndex<char> index_ GUARDED_BY(mu_);  // the value is unused
  TierCounters counters_;
};

}  // namespace strata::engine::kvtier
