#include "engine/serving/tiered_cache_port.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

namespace strata::engine::serving {

std::string FormatId(const std::string& model_fingerprint, const kv::KvLayout& layout) {
  return "strata-kv/1;model=" + model_fingerprint +
         ";dtype=" + std::string(kv::KvDTypeName(layout.dtype)) +
         ";block=" + std::to_string(layout.block_size) +
         ";layers=" + std::to_string(layout.n_layers) + ";kv_dim=" + std::to_string(layout.kv_dim);
}

TieredCachePort::TieredCachePort(kvtier::TieredKvCache* cache, kv::KvStorage* storage,
                                 size_t max_queued_writes)
    : cache_(cache), storage_(storage), max_queue_(max_queued_writes) {
  const kv::KvLayout& l = storage_->layout();
  slab_bytes_ = l.RowBytes() * static_cast<size_t>(l.block_size);
  block_bytes_ = l.BlockBytes();
}

std::vector<uint8_t> TieredCachePort::ReadBlock(int32_t block) const {
  std::vector<uint8_t> out(block_bytes_);
  uint8_t* p = out.data();
  for (int layer = 0; layer < storage_->layout().n_layers; ++layer) {
    std::memcpy(p, storage_->K(layer, block, 0), slab_bytes_);
    p += slab_bytes_;
    std::memcpy(p, storage_->V(layer, block, 0), slab_bytes_);
    p += slab_bytes_;
  }
  return out;
}

void TieredCachePort::WriteBlock(int32_t block, const std::vector<uint8_t>& payload) {
  if (payload.size() != block_bytes_)
    return;  // the cache verified the length; never write a short block
  const uint8_t* p = payload.data();
  for (int layer = 0; layer < storage_->layout().n_layers; ++layer) {
    std::memcpy(storage_->MutableK(layer, block, 0), p, slab_bytes_);
    p += slab_bytes_;
    std::memcpy(storage_->MutableV(layer, block, 0), p, slab_bytes_);
    p += slab_bytes_;
  }
}

void TieredCachePort::Demote(int32_t block, const kv::BlockHash& hash, std::string_view tenant) {
  if (flush_mode_) {
    // Shutdown flush: wait for room rather than drop (bounded: the workers drain the queue).
    const int64_t room = static_cast<int64_t>(std::max<size_t>(1, max_queue_ / 2));
    for (int i = 0; i < 10000 && cache_->Stats().queued_writes >= room; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  cache_->Demote(hash, tenant, ReadBlock(block));
}

void TieredCachePort::Publish(int32_t block, const kv::BlockHash& hash, std::string_view tenant) {
  cache_->Publish(hash, tenant, ReadBlock(block));
}

namespace {
class FetchAdapter final : public sched::TierPort::Fetch {
 public:
  explicit FetchAdapter(std::shared_ptr<kvtier::PrefetchHandle> h) : h_(std::move(h)) {}
  bool ready() const override { return h_->ready(); }
  std::vector<std::vector<uint8_t>> Take() override { return h_->Take(); }
  void Cancel() override { h_->Cancel(); }

 private:
  std::shared_ptr<kvtier::PrefetchHandle> h_;
};
}  // namespace

std::shared_ptr<sched::TierPort::Fetch> TieredCachePort::Prefetch(std::vector<kv::BlockHash> hashes,
                                                                  std::string_view tenant,
                                                                  std::function<void()> wake) {
  return std::make_shared<FetchAdapter>(
      cache_->Prefetch(std::move(hashes), tenant, std::move(wake)));
}

void TieredCachePort::Fill(int32_t block, const std::vector<uint8_t>& payload) {
  WriteBlock(block, payload);
}

}  // namespace strata::engine::serving
