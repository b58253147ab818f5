// Helpers shared by the kvtier tests.
#pragma once

#include <stdlib.h>

#include <array>
#include <chrono>
#include <filesystem>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "engine/kvtier/block_codec.h"
#include "engine/kvtier/tiered_cache.h"

namespace strata::engine::kvtier::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "kvtier-test-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data()) ? tmpl : "";
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline BlockKey Key(int i) {
  BlockKey k{};
  for (size_t j = 0; j < k.size(); ++j) k[j] = static_cast<uint8_t>(i * 7 + j * 13 + (i >> 8));
  k[0] = static_cast<uint8_t>(i);
  k[1] = static_cast<uint8_t>(i >> 8);
  return k;
}

// Incompressible-looking payload unique to `i`.
inline std::vector<uint8_t> Payload(size_t n, int i) {
  std::vector<uint8_t> v(n);
  uint64_t x = 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(i + 1);
  for (auto& b : v) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b = static_cast<uint8_t>(x);
  }
  return v;
}

// Waits (polling, generous deadline for loaded CI machines) until pred() is true.
inline bool WaitFor(const std::function<bool()>& pred, double seconds = 30) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return pred();
}

inline std::string EntryPath(const std::string& dir, const BlockKey& key) {
  std::string hex = KeyHex(key);
  return dir + "/" + hex.substr(0, 2) + "/" + hex + ".kvb";
}

// Runs a prefetch and waits for it.
inline std::vector<std::vector<uint8_t>> PrefetchSync(TieredKvCache& cache,
                                                      std::vector<BlockKey> keys,
                                                      std::string_view tenant = "") {
  auto h = cache.Prefetch(std::move(keys), tenant, nullptr);
  if (!WaitFor([&] { return h->ready(); })) return {};
  return h->Take();
}

// Records a cache's block events (TierObserver) as the set of keys each tier holds, and counts
// them. Thread-safe (observers run on worker threads).
class TierEventRecorder {
 public:
  TierObserver Observer() {
    return [this](TierId tier, const BlockKey& key, bool present) {
      std::lock_guard<std::mutex> lock(mu_);
      auto& set = held_[static_cast<size_t>(tier)];
      if (present) {
        adds_ += set.insert(key).second ? 1 : 0;
      } else {
        removes_ += set.erase(key);
      }
      ++events_;
    };
  }
  std::set<BlockKey> Held(TierId tier) const {
    std::lock_guard<std::mutex> lock(mu_);
    return held_[static_cast<size_t>(tier)];
  }
  bool Holds(TierId tier, const BlockKey& key) const { return Held(tier).count(key) != 0; }
  int64_t events() const {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }
  // Events that changed nothing (an add of a held key, a remove of an absent one).
  int64_t redundant() const {
    std::lock_guard<std::mutex> lock(mu_);
    return events_ - adds_ - removes_;
  }

 private:
  mutable std::mutex mu_;
  std::array<std::set<BlockKey>, 3> held_;
  int64_t events_ = 0, adds_ = 0, removes_ = 0;
};

}  // namespace strata::engine::kvtier::testing
