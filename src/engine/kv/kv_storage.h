// KvStorage: the physical paged KV cache — for every layer, K and V arrays of
// [num_blocks][block_size][kv_dim] elements in one dtype (F16 default; F32 or Q8_0 selectable).
//
// A token's K (or V) vector for one layer is one "row" of kv_dim elements at (block, slot).
// F16/F32 rows are plain arrays; Q8_0 rows are kv_dim/32 BlockQ8_0 blocks (kv_dim must be a
// multiple of 32 for Q8_0).
// Ownership: owns the memory (allocated once at construction, never resized).
// Thread contract: owned by the engine thread. Writes to distinct (layer, block, slot) rows and
// reads of rows not being written may run concurrently on the engine's thread pool.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace strata::engine::kv {

enum class KvDType { kF16, kF32, kQ8_0 };
std::string_view KvDTypeName(KvDType t);
Result<KvDType> ParseKvDType(std::string_view name);  // "f16", "f32", "q8_0"

struct KvLayout {
  int n_layers = 0;
  int kv_dim = 0;       // n_kv_heads * head_dim
  int block_size = 16;  // tokens per block
  int num_blocks = 0;
  KvDType dtype = KvDType::kF16;

  size_t RowBytes() const;  // bytes of one token's K (or V) vector for one layer
  // Bytes one block occupies across all layers, K and V.
  size_t BlockBytes() const { return RowBytes() * static_cast<size_t>(block_size) * 2 * static_cast<size_t>(n_layers); }
  Status Validate() const;
};

class KvStorage {
 public:
  // Allocates layout.num_blocks blocks (zeroed). Validate() the layout first.
  explicit KvStorage(const KvLayout& layout);

  const KvLayout& layout() const { return layout_; }

  // Stores one token's f32 K and V vectors (kv_dim each), converting to the dtype.
  void Write(int layer, int32_t block, int slot, const float* k, const float* v);
  // Raw row pointers (dtype-encoded). Row r of a block is at K(layer, block) + r * RowBytes().
  const uint8_t* K(int layer, int32_t block, int slot) const;
  const uint8_t* V(int layer, int32_t block, int slot) const;
  // Decodes one row to f32 (kv_dim values).
  void ReadK(int layer, int32_t block, int slot, float* out) const;
  void ReadV(int layer, int32_t block, int slot, float* out) const;
  // Copies all layers' rows [0, num_slots) of block src into block dst (copy-on-write).
  void CopyBlock(int32_t src, int32_t dst, int num_slots);

 private:
  uint8_t* Row(bool is_v, int layer, int32_t block, int slot);
  const uint8_t* Row(bool is_v, int layer, int32_t block, int slot) const;
  KvLayout layout_;
  std::vector<uint8_t> k_, v_;  // [layer][block][slot][row bytes]
};

}  // namespace strata::engine::kv
