// KvStorage: the physical paged KV cache — for every layer, K and V arrays of
// [num_blocks][block_size][kv_dim] elements in one dtype (F16 default; F32 or Q8_0 selectable).
//
// A token's K (or V) vector for one layer is one "row" of kv_dim elements at (block, slot).
// F16/F32 rows are plain arrays; Q8_0 rows are kv_dim/32 BlockQ8_0 blocks (kv_dim must be a
// multiple of 32 for Q8_0): per 32 elements d = amax/127 stored as f16, q = round(x / d).
// Memory layout of each of the K and V arrays: [layer][block][slot][RowBytes()], so the rows of
// one block of one layer are contiguous (row r of block b is at K(layer, b, 0) + r * RowBytes()).
// Ownership: owns the memory (allocated once at construction, never resized). The memory is
// zero-filled lazily by the OS (calloc), so a large pool costs nothing until it is touched.
// Thread contract: owned by the engine thread. Writes to distinct (layer, block, slot) rows and
// reads of rows not being written may run concurrently on the engine's thread pool.
// Errors: bad layouts are refused by KvLayout::Validate / KvStorage::Create with a Status. The
// per-row accessors take indices computed by the engine itself (not from requests); they check
// them with assert() in debug builds only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string_view>
#include <vector>

#include "base/page_memory.h"
#include "base/status.h"

namespace strata::engine::kv {

enum class KvDType { kF16, kF32, kQ8_0 };
std::string_view KvDTypeName(KvDType t);              // "f16", "f32", "q8_0"
Result<KvDType> ParseKvDType(std::string_view name);  // "f16", "f32", "q8_0" (case-insensitive)

struct KvLayout {
  int n_layers = 0;
  int kv_dim = 0;       // n_kv_heads * head_dim
  int block_size = 16;  // tokens per block
  int num_blocks = 0;
  KvDType dtype = KvDType::kF16;

  size_t RowBytes() const;  // bytes of one token's K (or V) vector for one layer (0 if kv_dim <= 0)
  // Bytes one block occupies across all layers, K and V. Only meaningful for a layout whose
  // per-block fields pass Validate (use BlockBytesChecked otherwise).
  size_t BlockBytes() const {
    return RowBytes() * static_cast<size_t>(block_size) * 2 * static_cast<size_t>(n_layers);
  }
  // Positive n_layers/kv_dim/block_size/num_blocks, Q8_0 needs kv_dim % 32 == 0, and the total
  // size (K + V, all layers and blocks) must be representable (no overflow).
  Status Validate() const;
  // Like Validate but ignores num_blocks: checks the per-block fields only (used to size a pool).
  Status ValidatePerBlock() const;
  // BlockBytes() with overflow checking; 0 when the per-block fields are invalid.
  uint64_t BlockBytesChecked() const;
  // Total bytes of the K and V arrays together (num_blocks * BlockBytes()); 0 when invalid.
  uint64_t TotalBytes() const;
};

// How many blocks of `per_block_layout` (its num_blocks is ignored) fit in `bytes`; 0 when the
// per-block layout is invalid or nothing fits; clamped to INT32_MAX.
int NumBlocksForBudget(const KvLayout& per_block_layout, uint64_t bytes);

class KvStorage {
 public:
  // Validates the layout and allocates; kInvalidArgument for a bad layout, kResourceExhausted
  // when the total exceeds physical RAM or the memory cannot be allocated. Prefer this over the
  // constructor.
  static Result<std::unique_ptr<KvStorage>> Create(const KvLayout& layout);
  // Allocates layout.num_blocks blocks (zeroed). Validate() the layout first; aborts if the
  // layout is invalid or the allocation fails.
  explicit KvStorage(const KvLayout& layout);

  const KvLayout& layout() const { return layout_; }

  // Stores one token's f32 K and V vectors (kv_dim each), converting to the dtype.
  void Write(int layer, int32_t block, int slot, const float* k, const float* v);
  // Raw row pointers (dtype-encoded). Row r of a block is at K(layer, block) + r * RowBytes().
  const uint8_t* K(int layer, int32_t block, int slot) const;
  const uint8_t* V(int layer, int32_t block, int slot) const;
  // Mutable raw row pointers, for a runner that encodes rows itself (e.g. several at once).
  uint8_t* MutableK(int layer, int32_t block, int slot) { return Row(false, layer, block, slot); }
  uint8_t* MutableV(int layer, int32_t block, int slot) { return Row(true, layer, block, slot); }
  // Decodes one row to f32 (kv_dim values).
  void ReadK(int layer, int32_t block, int slot, float* out) const;
  void ReadV(int layer, int32_t block, int slot, float* out) const;
  // Copies all layers' rows [0, num_slots) of block src into block dst (copy-on-write).
  void CopyBlock(int32_t src, int32_t dst, int num_slots);

  // Encodes / decodes one row of kv_dim values in `dtype` (the conversions Write/Read use).
  static void EncodeRow(KvDType dtype, const float* src, uint8_t* dst, int kv_dim);
  static void DecodeRow(KvDType dtype, const uint8_t* src, float* dst, int kv_dim);

 private:
  KvStorage(const KvLayout& layout, PageMemory k, PageMemory v);
  // Zeroed memory for one of the two arrays; empty when the mapping fails.
  static PageMemory Allocate(uint64_t bytes);

  uint8_t* Row(bool is_v, int layer, int32_t block, int slot);
  const uint8_t* Row(bool is_v, int layer, int32_t block, int slot) const;
  size_t RowOffset(int layer, int32_t block, int slot) const;
  KvLayout layout_;
  size_t row_bytes_ = 0;
  PageMemory k_, v_;  // [layer][block][slot][row bytes] each
};

}  // namespace strata::engine::kv
