#include "engine/kv/kv_storage.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define STRATA_KV_X86 1
#endif

#include <algorithm>
#include <array>
#include <cassert>
#include <climits>
#include <cmath>
#include <cstring>
#include <string>

#include "base/ascii.h"
#include "base/checked.h"
#include "base/enum_names.h"
#include "base/memory_size.h"
#include "kernels/kernels.h"
#include "tensor/dtype.h"
#include "tensor/fp16.h"

namespace strata::engine::kv {

namespace {

#ifdef STRATA_KV_X86
// Hardware f32 -> f16 (round to nearest even, as F32ToF16; the two differ only in NaN payloads).
__attribute__((target("avx2,f16c"))) void F32RowToF16F16c(const float* src, uint8_t* dst,
                                                          size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h =
        _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * i), h);
  }
  for (; i < n; ++i) {
    const uint16_t h = F32ToF16(src[i]);
    std::memcpy(dst + 2 * i, &h, sizeof(h));
  }
}

// AVX2 and F16C (CPUID leaf 1, ECX bit 29; read directly because clang's __builtin_cpu_supports
// does not know "f16c").
bool HasF16c() {
  static const bool kHas = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
    return f16c && __builtin_cpu_supports("avx2");
  }();
  return kHas;
}
#endif

constexpr int kQ8Block = 32;  // elements per BlockQ8_0
// Each of the K and V arrays must stay addressable with ptrdiff_t arithmetic.
constexpr uint64_t kMaxArrayBytes = static_cast<uint64_t>(PTRDIFF_MAX) / 2;

}  // namespace

constexpr auto kDTypeNames = EnumNames<KvDType::kQ8_0>("f16", "f32", "q8_0");

std::string_view KvDTypeName(KvDType t) { return EnumName(kDTypeNames, t, "unknown"); }

Result<KvDType> ParseKvDType(std::string_view name) {
  for (KvDType t : {KvDType::kF16, KvDType::kF32, KvDType::kQ8_0}) {
    if (EqualsIgnoreCase(name, KvDTypeName(t))) return t;
  }
  return Status::InvalidArgument("unknown KV cache dtype '" + std::string(name) +
                                 "' (expected f16, f32 or q8_0)");
}

size_t KvLayout::RowBytes() const {
  if (kv_dim <= 0) return 0;
  const size_t n = static_cast<size_t>(kv_dim);
  switch (dtype) {
    case KvDType::kF16:
      return n * sizeof(uint16_t);
    case KvDType::kF32:
      return n * sizeof(float);
    case KvDType::kQ8_0:
      return n / kQ8Block * sizeof(BlockQ8_0);
  }
  return 0;
}

Status KvLayout::ValidatePerBlock() const {
  if (n_layers <= 0) {
    return Status::InvalidArgument("KV layout: n_layers must be positive, got " +
                                   std::to_string(n_layers));
  }
  if (kv_dim <= 0) {
    return Status::InvalidArgument("KV layout: kv_dim must be positive, got " +
                                   std::to_string(kv_dim));
  }
  if (block_size <= 0) {
    return Status::InvalidArgument("KV layout: block_size must be positive, got " +
                                   std::to_string(block_size));
  }
  if (dtype != KvDType::kF16 && dtype != KvDType::kF32 && dtype != KvDType::kQ8_0) {
    return Status::InvalidArgument("KV layout: unknown dtype");
  }
  if (dtype == KvDType::kQ8_0 && kv_dim % kQ8Block != 0) {
    return Status::InvalidArgument("KV layout: q8_0 needs kv_dim to be a multiple of 32, got " +
                                   std::to_string(kv_dim) + " (use --kv-cache-dtype f16)");
  }
  if (BlockBytesChecked() == 0) {
    return Status::InvalidArgument("KV layout: block size in bytes overflows");
  }
  return Status::Ok();
}

Status KvLayout::Validate() const {
  RETURN_IF_ERROR(ValidatePerBlock());
  if (num_blocks <= 0) {
    return Status::InvalidArgument("KV layout: num_blocks must be positive, got " +
                                   std::to_string(num_blocks) +
                                   " (raise the KV cache memory budget)");
  }
  if (TotalBytes() == 0) {
    return Status::InvalidArgument("KV layout: " + std::to_string(num_blocks) + " blocks of " +
                                   std::to_string(BlockBytesChecked()) +
                                   " bytes overflow the addressable size");
  }
  return Status::Ok();
}

uint64_t KvLayout::BlockBytesChecked() const {
  if (n_layers <= 0 || kv_dim <= 0 || block_size <= 0) return 0;
  if (dtype == KvDType::kQ8_0 && kv_dim % kQ8Block != 0) return 0;
  auto per_array = CheckedMul(RowBytes(), static_cast<uint64_t>(block_size));
  if (!per_array) return 0;
  per_array = CheckedMul(*per_array, static_cast<uint64_t>(n_layers));
  if (!per_array || *per_array > kMaxArrayBytes) return 0;
  auto both = CheckedMul(*per_array, 2);
  return both ? *both : 0;
}

uint64_t KvLayout::TotalBytes() const {
  const uint64_t block_bytes = BlockBytesChecked();
  if (block_bytes == 0 || num_blocks <= 0) return 0;
  auto total = CheckedMul(block_bytes, static_cast<uint64_t>(num_blocks));
  if (!total || *total / 2 > kMaxArrayBytes) return 0;
  return *total;
}

int NumBlocksForBudget(const KvLayout& per_block_layout, uint64_t bytes) {
  const uint64_t block_bytes = per_block_layout.BlockBytesChecked();
  if (block_bytes == 0) return 0;
  uint64_t n = bytes / block_bytes;
  // Keep each of the K/V arrays addressable as well.
  n = std::min<uint64_t>(n, kMaxArrayBytes / (block_bytes / 2));
  return static_cast<int>(std::min<uint64_t>(n, INT32_MAX));
}

// ---- KvStorage ----

PageMemory KvStorage::Allocate(uint64_t bytes) {
  // Anonymous, zeroed, untouched pages cost nothing; on transparent huge pages where THP allows
  // (base/page_memory.h): attention walks one head's rows across many blocks, a row_bytes stride
  // apart, and with 4 KiB pages nearly every row it reads is on a page of its own -- a TLB miss
  // per row once the pool outgrows the TLB's reach (~8 MiB).
  Result<PageMemory> m = PageMemory::Allocate(std::max<uint64_t>(bytes, 1));
  return m.ok() ? std::move(*m) : PageMemory();
}

Result<std::unique_ptr<KvStorage>> KvStorage::Create(const KvLayout& layout) {
  RETURN_IF_ERROR(layout.Validate());
  const uint64_t per_array = layout.TotalBytes() / 2;
  const uint64_t physical = PhysicalMemoryBytes();
  if (physical != 0 && layout.TotalBytes() > physical) {
    return Status::ResourceExhausted(
        "KV cache: " + std::to_string(layout.TotalBytes()) + " bytes (" +
        std::to_string(layout.num_blocks) + " blocks) exceed physical memory (" +
        std::to_string(physical) + " bytes); lower the KV cache memory budget");
  }
  PageMemory k = Allocate(per_array);
  PageMemory v = k ? Allocate(per_array) : PageMemory();
  if (!k || !v) {
    return Status::ResourceExhausted("KV cache: cannot allocate 2 x " + std::to_string(per_array) +
                                     " bytes (" + std::to_string(layout.num_blocks) +
                                     " blocks); lower the KV cache memory budget");
  }
  return std::unique_ptr<KvStorage>(new KvStorage(layout, std::move(k), std::move(v)));
}

KvStorage::KvStorage(const KvLayout& layout, PageMemory k, PageMemory v)
    : layout_(layout), row_bytes_(layout.RowBytes()), k_(std::move(k)), v_(std::move(v)) {}

KvStorage::KvStorage(const KvLayout& layout) : layout_(layout), row_bytes_(layout.RowBytes()) {
  // Programming error (the caller promised a validated layout): continuing would corrupt memory.
  if (!layout.Validate().ok()) std::abort();
  const uint64_t per_array = layout.TotalBytes() / 2;
  k_ = Allocate(per_array);
  v_ = Allocate(per_array);
  if (!k_ || !v_) std::abort();
}

size_t KvStorage::RowOffset(int layer, int32_t block, int slot) const {
  assert(layer >= 0 && layer < layout_.n_layers);
  assert(block >= 0 && block < layout_.num_blocks);
  assert(slot >= 0 && slot < layout_.block_size);
  const size_t row = (static_cast<size_t>(layer) * static_cast<size_t>(layout_.num_blocks) +
                      static_cast<size_t>(block)) *
                         static_cast<size_t>(layout_.block_size) +
                     static_cast<size_t>(slot);
  return row * row_bytes_;
}

uint8_t* KvStorage::Row(bool is_v, int layer, int32_t block, int slot) {
  return (is_v ? v_ : k_).data() + RowOffset(layer, block, slot);
}

const uint8_t* KvStorage::Row(bool is_v, int layer, int32_t block, int slot) const {
  return (is_v ? v_ : k_).data() + RowOffset(layer, block, slot);
}

const uint8_t* KvStorage::K(int layer, int32_t block, int slot) const {
  return Row(false, layer, block, slot);
}

const uint8_t* KvStorage::V(int layer, int32_t block, int slot) const {
  return Row(true, layer, block, slot);
}

void KvStorage::EncodeRow(KvDType dtype, const float* src, uint8_t* dst, int kv_dim) {
  const size_t n = static_cast<size_t>(kv_dim);
  switch (dtype) {
    case KvDType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case KvDType::kF16:
#ifdef STRATA_KV_X86
      if (HasF16c()) {
        F32RowToF16F16c(src, dst, n);
        return;
      }
#endif
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = F32ToF16(src[i]);
        std::memcpy(dst + 2 * i, &h, sizeof(h));
      }
      return;
    case KvDType::kQ8_0:
      kernels::QuantizeRow(DType::kQ8_0, src, dst, n);
      return;
  }
}

void KvStorage::DecodeRow(KvDType dtype, const uint8_t* src, float* dst, int kv_dim) {
  const size_t n = static_cast<size_t>(kv_dim);
  switch (dtype) {
    case KvDType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case KvDType::kF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, sizeof(h));
        dst[i] = F16ToF32(h);
      }
      return;
    case KvDType::kQ8_0:
      kernels::DequantizeRow(DType::kQ8_0, src, dst, n);
      return;
  }
}

void KvStorage::Write(int layer, int32_t block, int slot, const float* k, const float* v) {
  EncodeRow(layout_.dtype, k, Row(false, layer, block, slot), layout_.kv_dim);
  EncodeRow(layout_.dtype, v, Row(true, layer, block, slot), layout_.kv_dim);
}

void KvStorage::ReadK(int layer, int32_t block, int slot, float* out) const {
  DecodeRow(layout_.dtype, Row(false, layer, block, slot), out, layout_.kv_dim);
}

void KvStorage::ReadV(int layer, int32_t block, int slot, float* out) const {
  DecodeRow(layout_.dtype, Row(true, layer, block, slot), out, layout_.kv_dim);
}

void KvStorage::CopyBlock(int32_t src, int32_t dst, int num_slots) {
  assert(num_slots >= 0 && num_slots <= layout_.block_size);
  if (src == dst || num_slots <= 0) return;
  num_slots = std::min(num_slots, layout_.block_size);
  const size_t bytes = static_cast<size_t>(num_slots) * row_bytes_;
  for (int layer = 0; layer < layout_.n_layers; ++layer) {
    std::memcpy(Row(false, layer, dst, 0), Row(false, layer, src, 0), bytes);
    std::memcpy(Row(true, layer, dst, 0), Row(true, layer, src, 0), bytes);
  }
}

}  // namespace strata::engine::kv
