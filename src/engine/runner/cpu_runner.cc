// CpuModelRunner. Why it is shaped this way:
// - One activation matrix for the whole batch: every MatMul streams its weight matrix once per
//   step, whatever the number of sequences (the point of continuous batching on a CPU, where
//   decode is bound by weight bandwidth).
// - Batch invariance (README.md): every per-token op (embedding, RmsNorm, RoPE, residual adds,
//   SiluMul) touches only its own row; kernels::MatMul computes each (row, token) output with the
//   same instruction sequence whatever the token count or tiling; attention of a (token, head)
//   pair reads only its own sequence's K/V and runs the same ops in the same order wherever the
//   work item boundaries fall. So a token's logits are a function of its own sequence only.
// - Attention work items are (sequence, kv head, tile of tokens): the K/V rows of the head are
//   decoded to f32 once per item and reused by every query head of the GQA group and every token
//   of the tile. Items are handed out dynamically (an atomic counter) because their costs differ
//   by orders of magnitude (a long prefill tile vs a short decode); which thread computes an item
//   never changes its result.
// - With F32 KV the math is the single-sequence path's (kernels::Attend over positions 0..pos of
//   a contiguous f32 history, the path `strata generate` ran before it became a use of this
//   runner), bit for bit: a table of consecutive blocks is read in place (ConsecutiveBlocks), any
//   other is gathered into such a history first (same bits: Attend's arithmetic does not depend on
//   the stride).
// - want_hidden rows (embeddings) go through the whole last layer and the final norm like a row
//   that wants logits; only the output projection is skipped for them. want_all_logits rows
//   (prompt logprobs) are planned like want_hidden ones and all go through the output projection.
#include "engine/runner/cpu_runner.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cassert>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>

#include "kernels/kernels.h"
#include "tensor/dtype.h"
#include "tensor/fp16.h"

namespace strata::engine::runner {
namespace {

std::string SeqName(size_t index, const BatchSeq& s) {
  return "batch entry " + std::to_string(index) + " (seq " + std::to_string(s.seq_id) + ")";
}

// (in, out) of each LoRA target's base matrix, in lora::Target order.
std::array<std::array<int, 2>, lora::kNumTargets> TargetShapes(const model::ModelConfig& c) {
  const int d = c.dim, qd = c.q_dim(), kvd = c.kv_dim(), f = c.ffn;
  return {{{d, qd}, {d, kvd}, {d, kvd}, {qd, d}, {d, f}, {d, f}, {f, d}}};
}

// Whether a pair's sizes fit the matrix it modifies (in -> out). Checked every step, so it
// allocates nothing; PairMismatch builds the error naming the tensor.
bool PairFits(const lora::LoraPair& p, int in, int out) {
  const size_t rank = static_cast<size_t>(p.rank);
  return p.rank > 0 && p.in == in && p.out == out && p.a.size() == rank * static_cast<size_t>(in) &&
         p.b.size() == static_cast<size_t>(out) * rank;
}

std::string PairMismatch(const lora::LoraPair& p, const std::string& tensor, int in, int out) {
  return tensor + " pair (rank " + std::to_string(p.rank) + ", in " + std::to_string(p.in) +
         ", out " + std::to_string(p.out) + ", " + std::to_string(p.a.size()) + " + " +
         std::to_string(p.b.size()) + " floats) does not fit the model's matrix (in " +
         std::to_string(in) + ", out " + std::to_string(out) + ")";
}

}  // namespace

CpuModelRunner::CpuModelRunner(const model::Model& model, kv::KvStorage* storage, ThreadPool* pool)
    : model_(model), cfg_(model.config()), storage_(storage), pool_(pool), rope_(model.config()) {}

Status CpuModelRunner::CheckLayout() const {
  if (storage_ == nullptr) return Status::InvalidArgument("runner has no KV storage");
  const kv::KvLayout& lay = storage_->layout();
  if (lay.n_layers != cfg_.n_layers || lay.kv_dim != cfg_.kv_dim())
    return Status::InvalidArgument("KV storage layout (" + std::to_string(lay.n_layers) +
                                   " layers, kv_dim " + std::to_string(lay.kv_dim) +
                                   ") does not fit the model (" + std::to_string(cfg_.n_layers) +
                                   " layers, kv_dim " + std::to_string(cfg_.kv_dim()) + ")");
  if (lay.block_size <= 0 || lay.num_blocks < 0)
    return Status::InvalidArgument("KV storage layout has block_size " +
                                   std::to_string(lay.block_size) + " and " +
                                   std::to_string(lay.num_blocks) + " blocks");
  return Status::Ok();
}

Status CpuModelRunner::CheckAdapter(size_t index, const BatchSeq& s) const {
  const lora::Adapter& a = *s.lora;
  auto fail = [&](const std::string& what) {
    return Status::InvalidArgument(SeqName(index, s) + " uses LoRA adapter '" + a.name() +
                                   "': " + what);
  };
  const auto shapes = TargetShapes(cfg_);
  for (int l = 0; l < cfg_.n_layers; ++l)
    for (size_t t = 0; t < lora::kNumTargets; ++t) {
      const lora::Target target = static_cast<lora::Target>(t);
      const lora::LoraPair* p = a.Find(l, target);
      if (p == nullptr || PairFits(*p, shapes[t][0], shapes[t][1])) continue;
      return fail(PairMismatch(
          *p, "blk." + std::to_string(l) + "." + std::string(lora::TargetTensorSuffix(target)),
          shapes[t][0], shapes[t][1]));
    }
  // An adapter made for a deeper model has pairs past the model's last layer.
  for (size_t t = 0; t < lora::kNumTargets; ++t)
    if (a.Find(cfg_.n_layers, static_cast<lora::Target>(t)) != nullptr)
      return fail("it has layer " + std::to_string(cfg_.n_layers) + " but the model has " +
                  std::to_string(cfg_.n_layers) + " layers");
  const lora::LoraPair* out = a.output();
  if (out != nullptr && !PairFits(*out, cfg_.dim, cfg_.n_vocab))
    return fail(PairMismatch(*out, "output.weight", cfg_.dim, cfg_.n_vocab));
  const lora::LoraPair* embd = a.token_embd();
  if (embd != nullptr && !PairFits(*embd, cfg_.n_vocab, cfg_.dim))
    return fail(PairMismatch(*embd, "token_embd.weight", cfg_.n_vocab, cfg_.dim));
  return Status::Ok();
}

Status CpuModelRunner::ValidateBatch(std::span<const BatchSeq> batch) const {
  RETURN_IF_ERROR(CheckLayout());
  const kv::KvLayout& lay = storage_->layout();
  const int64_t bs = lay.block_size;
  const int64_t capacity =
      bs * static_cast<int64_t>(lay.num_blocks);  // positions one sequence can hold
  for (size_t i = 0; i < batch.size(); ++i) {
    const BatchSeq& s = batch[i];
    if (s.tokens.empty()) return Status::InvalidArgument(SeqName(i, s) + " has no tokens");
    if (s.start_pos < 0)
      return Status::InvalidArgument(SeqName(i, s) + " has negative start_pos " +
                                     std::to_string(s.start_pos));
    const int64_t end = static_cast<int64_t>(s.start_pos) + static_cast<int64_t>(s.tokens.size());
    if (end > capacity)
      return Status::InvalidArgument(SeqName(i, s) + " reaches position " + std::to_string(end) +
                                     ", beyond the KV storage capacity of " +
                                     std::to_string(capacity) + " tokens");
    const int64_t blocks_needed = (end + bs - 1) / bs;
    if (static_cast<int64_t>(s.block_table.size()) < blocks_needed)
      return Status::InvalidArgument(SeqName(i, s) + " needs " + std::to_string(blocks_needed) +
                                     " blocks for positions [0, " + std::to_string(end) +
                                     ") but its block table has " +
                                     std::to_string(s.block_table.size()));
    for (int64_t b = 0; b < blocks_needed; ++b) {
      const int32_t id = s.block_table[static_cast<size_t>(b)];
      if (id < 0 || id >= lay.num_blocks)
        return Status::InvalidArgument(SeqName(i, s) + " block table entry " + std::to_string(b) +
                                       " is block " + std::to_string(id) + ", outside [0, " +
                                       std::to_string(lay.num_blocks) + ")");
    }
    for (int32_t id : s.tokens)
      if (id < 0 || id >= cfg_.n_vocab)
        return Status::InvalidArgument(SeqName(i, s) + " has token id " + std::to_string(id) +
                                       " out of range [0, " + std::to_string(cfg_.n_vocab) + ")");
    // Each distinct adapter once (its first entry is the one named).
    if (s.lora != nullptr) {
      bool seen = false;
      for (size_t j = 0; j < i && !seen; ++j) seen = batch[j].lora == s.lora;
      if (!seen) RETURN_IF_ERROR(CheckAdapter(i, s));
    }
  }
  return Status::Ok();
}

void CpuModelRunner::EnsureScratch(size_t n, size_t max_len, size_t n_items) {
  const size_t dim = static_cast<size_t>(cfg_.dim), qd = static_cast<size_t>(cfg_.q_dim());
  const size_t kvd = static_cast<size_t>(cfg_.kv_dim()), ffn = static_cast<size_t>(cfg_.ffn);
  const size_t hd = static_cast<size_t>(cfg_.head_dim);
  const size_t group = static_cast<size_t>(cfg_.n_heads / cfg_.n_kv_heads);
  if (n > scratch_tokens_) {
    x_.resize(n * dim);
    xn_.resize(n * dim);
    q_.resize(n * qd);
    k_.resize(n * kvd);
    v_.resize(n * kvd);
    att_.resize(n * qd);
    gate_.resize(n * ffn);
    up_.resize(n * ffn);
    scratch_tokens_ = n;
  }
  const size_t threads = pool_ ? static_cast<size_t>(pool_->num_threads()) : 1;
  if (thread_scratch_.size() < threads) {
    thread_scratch_.resize(threads);
    for (auto& ts : thread_scratch_) ts.row.resize(kvd);
  }
  if (max_len > scratch_len_) {
    // Contexts grow by one token per decode step: grow geometrically, in 256-position steps, so
    // the per-thread buffers are reallocated O(log) times over a sequence's life.
    max_len = std::max(max_len, 2 * scratch_len_);
    max_len = (max_len + 255) / 256 * 256;
    for (auto& ts : thread_scratch_) {
      if (storage_->layout().dtype == kv::KvDType::kF16) {
        ts.k16.resize(max_len * hd);
        ts.v16.resize(max_len * hd);
      } else {
        ts.k.resize(max_len * hd);
        ts.v.resize(max_len * hd);
      }
      ts.scores.resize(max_len *
                       group);  // F16 attention: one row of scores per query head of a group
      const size_t bs = static_cast<size_t>(storage_->layout().block_size);
      ts.k_blocks.resize(max_len / bs + 1);
      ts.v_blocks.resize(max_len / bs + 1);
    }
    scratch_len_ = max_len;
  }
  if (items_.capacity() < n_items) items_.reserve(n_items);
}

void CpuModelRunner::WriteKv(int layer, std::span<const BatchSeq> batch) {
  const size_t kvd = static_cast<size_t>(cfg_.kv_dim());
  const int bs = storage_->layout().block_size;
  for (size_t s = 0; s < batch.size(); ++s) {
    const BatchSeq& seq = batch[s];
    for (size_t t = 0; t < seq.tokens.size(); ++t) {
      const int pos = seq.start_pos + static_cast<int>(t);
      const size_t row = seq_row_begin_[s] + t;
      storage_->Write(layer, seq.block_table[static_cast<size_t>(pos / bs)], pos % bs,
                      k_.data() + row * kvd, v_.data() + row * kvd);
    }
  }
}

void CpuModelRunner::GatherHead(bool is_v, int layer, std::span<const int32_t> table, int kv_head,
                                size_t len, float* dst, float* row_tmp) const {
  const kv::KvLayout& lay = storage_->layout();
  assert(lay.dtype != kv::KvDType::kF16 && "F16 storage is read by GatherHeadF16 / in place");
  const size_t hd = static_cast<size_t>(cfg_.head_dim), kvd = static_cast<size_t>(lay.kv_dim);
  const size_t bs = static_cast<size_t>(lay.block_size);
  const size_t head_off = static_cast<size_t>(kv_head) * hd;  // in elements
  for (size_t p = 0; p < len; ++p) {
    const int32_t block = table[p / bs];
    const int slot = static_cast<int>(p % bs);
    const uint8_t* row = is_v ? storage_->V(layer, block, slot) : storage_->K(layer, block, slot);
    float* out = dst + p * hd;
    if (lay.dtype == kv::KvDType::kF32) {
      std::memcpy(out, row + head_off * sizeof(float), hd * sizeof(float));
    } else if (hd % kQK8_0 == 0) {  // Q8_0, the head is whole Q8_0 blocks: decode just those
      kernels::DequantizeRow(DType::kQ8_0, row + (head_off / kQK8_0) * sizeof(BlockQ8_0), out, hd);
    } else {
      kernels::DequantizeRow(DType::kQ8_0, row, row_tmp, kvd);
      std::memcpy(out, row_tmp + head_off, hd * sizeof(float));
    }
  }
}

bool CpuModelRunner::ConsecutiveBlocks(std::span<const int32_t> table, size_t len) const {
  const size_t bs = static_cast<size_t>(storage_->layout().block_size);
  const size_t blocks = (len + bs - 1) / bs;
  for (size_t b = 1; b < blocks; ++b)
    if (table[b] != table[0] + static_cast<int32_t>(b)) return false;
  return true;
}

void CpuModelRunner::GatherHeadF16(bool is_v, int layer, std::span<const int32_t> table,
                                   int kv_head, size_t len, uint16_t* dst) const {
  const size_t hd = static_cast<size_t>(cfg_.head_dim);
  const size_t bs = static_cast<size_t>(storage_->layout().block_size);
  const size_t head_off = static_cast<size_t>(kv_head) * hd * sizeof(uint16_t);  // in bytes
  const size_t bytes = hd * sizeof(uint16_t);
  const size_t row_bytes = storage_->layout().RowBytes();
  // Block by block: rows of a block are row_bytes apart (kv_storage.h), so the address arithmetic
  // is once per block and the copies are a plain strided walk.
  for (size_t p0 = 0; p0 < len; p0 += bs) {
    const int32_t block = table[p0 / bs];
    const uint8_t* base =
        (is_v ? storage_->V(layer, block, 0) : storage_->K(layer, block, 0)) + head_off;
    const size_t n = std::min(bs, len - p0);
    uint16_t* out = dst + p0 * hd;
    if (bytes == 128) {  // head_dim 64: a constant-size copy the compiler inlines
      for (size_t r = 0; r < n; ++r) std::memcpy(out + r * hd, base + r * row_bytes, 128);
    } else {
      for (size_t r = 0; r < n; ++r) std::memcpy(out + r * hd, base + r * row_bytes, bytes);
    }
  }
}

void CpuModelRunner::AttendItem(int layer, const BatchSeq& seq, size_t row_begin,
                                const AttnItem& item, int thread) {
  const size_t hd = static_cast<size_t>(cfg_.head_dim), qd = static_cast<size_t>(cfg_.q_dim());
  const size_t group = static_cast<size_t>(cfg_.n_heads / cfg_.n_kv_heads);
  const float scale = 1.0f / std::sqrt(static_cast<float>(cfg_.head_dim));
  ThreadScratch& ts = thread_scratch_[static_cast<size_t>(thread)];
  const size_t len =
      static_cast<size_t>(seq.start_pos) + static_cast<size_t>(item.t1);  // last pos + 1
  // F16 KV (the default): the head's rows are copied as halves and widened inside the attention
  // kernel (same bits as widening here; half the bytes written and re-read per query head).
  const bool f16 = storage_->layout().dtype == kv::KvDType::kF16;
  // F16, one query token (decode), power-of-two blocks: attention reads the rows where they are
  // stored (a table of block addresses, no copy; same bits as on a copy). Items of several tokens
  // (prefill tiles) gather the head's rows first: every token then re-reads them from a compact
  // copy instead of from rows spread over the blocks (measured: 134M, 8 x 1536-token prompts,
  // paged prefill tiles were 15-40 % slower; paged decode ~15 % faster).
  const int bs = storage_->layout().block_size;
  const bool paged = f16 && item.t1 - item.t0 == 1 && (bs & (bs - 1)) == 0;
  const unsigned shift = static_cast<unsigned>(std::countr_zero(static_cast<unsigned>(bs)));
  const size_t row_stride = storage_->layout().RowBytes() / sizeof(uint16_t);
  if (paged) {
    const size_t head_off = static_cast<size_t>(item.kv_head) * hd;
    for (size_t b = 0; b * static_cast<size_t>(bs) < len; ++b) {
      const int32_t block = seq.block_table[b];
      ts.k_blocks[b] = reinterpret_cast<const uint16_t*>(storage_->K(layer, block, 0)) + head_off;
      ts.v_blocks[b] = reinterpret_cast<const uint16_t*>(storage_->V(layer, block, 0)) + head_off;
    }
  } else if (f16) {
    GatherHeadF16(false, layer, seq.block_table, item.kv_head, len, ts.k16.data());
    GatherHeadF16(true, layer, seq.block_table, item.kv_head, len, ts.v16.data());
  }
  // F32 storage with consecutive blocks: the head's rows are read in place (stride kv_dim).
  const float* k32 = nullptr;
  const float* v32 = nullptr;
  size_t stride32 = hd;
  if (storage_->layout().dtype == kv::KvDType::kF32 && ConsecutiveBlocks(seq.block_table, len)) {
    const size_t head_off = static_cast<size_t>(item.kv_head) * hd;
    const int32_t first = seq.block_table[0];
    k32 = reinterpret_cast<const float*>(storage_->K(layer, first, 0)) + head_off;
    v32 = reinterpret_cast<const float*>(storage_->V(layer, first, 0)) + head_off;
    stride32 = static_cast<size_t>(cfg_.kv_dim());
  } else if (!f16) {
    GatherHead(false, layer, seq.block_table, item.kv_head, len, ts.k.data(), ts.row.data());
    GatherHead(true, layer, seq.block_table, item.kv_head, len, ts.v.data(), ts.row.data());
    k32 = ts.k.data();
    v32 = ts.v.data();
  }
  float* scores = ts.scores.data();
  const size_t h0 = static_cast<size_t>(item.kv_head) * group;
  for (int32_t t = item.t0; t < item.t1; ++t) {
    const size_t row = row_begin + static_cast<size_t>(t);
    const size_t n =
        static_cast<size_t>(seq.start_pos) + static_cast<size_t>(t) + 1;  // causal: 0..pos
    // F16: the group's query heads together, so each K/V row is read once for all of them.
    const float* qg = q_.data() + row * qd + h0 * hd;
    float* outg = att_.data() + row * qd + h0 * hd;
    if (paged) {
      kernels::AttendF16Paged(qg, group, ts.k_blocks.data(), ts.v_blocks.data(), shift, row_stride,
                              n, hd, scale, scores, outg);
      continue;
    }
    if (f16) {
      kernels::AttendF16(qg, group, ts.k16.data(), ts.v16.data(), hd, n, hd, scale, scores, outg);
      continue;
    }
    for (size_t h = 0; h < group; ++h)
      kernels::Attend(qg + h * hd, k32, v32, stride32, n, hd, scale, scores, outg + h * hd);
  }
}

void CpuModelRunner::Attention(int layer, std::span<const BatchSeq> batch,
                               const std::vector<AttnItem>& items) {
  cur_layer_ = layer;
  cur_batch_ = batch;
  cur_items_ = &items;
  next_item_.store(0, std::memory_order_relaxed);
  // Captures only `this`, so the std::function below stores it inline (no allocation per layer).
  auto body = [this](int thread) {
    for (;;) {
      const size_t i = next_item_.fetch_add(1, std::memory_order_relaxed);
      if (i >= cur_items_->size()) return;
      const AttnItem& it = (*cur_items_)[i];
      const size_t s = static_cast<size_t>(it.seq);
      AttendItem(cur_layer_, cur_batch_[s], seq_row_begin_[s], it, thread);
    }
  };
  if (pool_ != nullptr && items.size() > 1) {
    pool_->RunOnAll(std::function<void(int)>(body));
  } else {
    body(0);
  }
}

template <typename F>
void CpuModelRunner::ForRows(size_t n, F&& fn) {
  // Per-row ops: a row's result never depends on which thread computes it. Small steps (decode)
  // stay on the engine thread, where a dispatch would cost more than the op.
  if (pool_ != nullptr && n >= kParallelRowsMin) {
    pool_->ParallelFor(n, fn, kParallelRowsMin / 2);
  } else {
    fn(0, n, 0);
  }
}

size_t CpuModelRunner::PlanStep(std::span<const BatchSeq> batch) {
  // Rows, context lengths and attention work items (shared by all layers).
  const size_t tile = static_cast<size_t>(kAttnTileTokens);
  size_t n = 0, max_len = 0, n_items = 0;
  for (const BatchSeq& s : batch) {
    n += s.tokens.size();
    max_len = std::max(max_len, static_cast<size_t>(s.start_pos) + s.tokens.size());
    n_items += static_cast<size_t>(cfg_.n_kv_heads) * ((s.tokens.size() + tile - 1) / tile);
  }
  if (seq_row_begin_.capacity() < batch.size()) seq_row_begin_.reserve(batch.size());
  seq_row_begin_.clear();
  EnsureScratch(n, max_len, n_items);
  items_.clear();
  out_rows_.clear();
  out_items_.clear();
  logit_rows_.clear();
  hidden_dst_.clear();
  int64_t n_hidden = 0;
  auto add_tiles = [&](std::vector<AttnItem>* items, size_t s) {
    const size_t ns = batch[s].tokens.size();
    for (size_t t0 = 0; t0 < ns; t0 += tile) {
      const size_t t1 = std::min(ns, t0 + tile);
      const int64_t len = static_cast<int64_t>(batch[s].start_pos) + static_cast<int64_t>(t1);
      for (int h = 0; h < cfg_.n_kv_heads; ++h)
        items->push_back(AttnItem{static_cast<int32_t>(s), h, static_cast<int32_t>(t0),
                                  static_cast<int32_t>(t1), len * static_cast<int64_t>(t1 - t0)});
    }
  };
  for (size_t s = 0, row = 0; s < batch.size(); ++s) {
    const BatchSeq& b = batch[s];
    seq_row_begin_.push_back(row);
    const size_t ns = b.tokens.size();
    add_tiles(&items_, s);
    // The rows the last layer computes: every row of a want_hidden sequence (with its tiles), or
    // the last row of a want_logits one (one-token items).
    if (b.want_hidden || b.want_all_logits) {
      for (size_t t = 0; t < ns; ++t) {
        out_rows_.push_back(row + t);
        hidden_dst_.push_back(b.want_hidden ? n_hidden++ : -1);
        if (b.want_all_logits) logit_rows_.push_back(out_rows_.size() - 1);
      }
      add_tiles(&out_items_, s);
    } else if (b.want_logits) {
      out_rows_.push_back(row + ns - 1);
      hidden_dst_.push_back(-1);
      const int32_t last = static_cast<int32_t>(ns);
      const int64_t len = static_cast<int64_t>(b.start_pos) + last;
      for (int h = 0; h < cfg_.n_kv_heads; ++h)
        out_items_.push_back(AttnItem{static_cast<int32_t>(s), h, last - 1, last, len});
    }
    if (b.want_logits && !b.want_all_logits) logit_rows_.push_back(out_rows_.size() - 1);
    row += ns;
  }
  // Most expensive first so the dynamic hand-out ends balanced (order never affects results).
  auto by_cost = [](const AttnItem& a, const AttnItem& b) {
    if (a.cost != b.cost) return a.cost > b.cost;
    if (a.seq != b.seq) return a.seq < b.seq;
    if (a.t0 != b.t0) return a.t0 < b.t0;
    return a.kv_head < b.kv_head;
  };
  std::sort(items_.begin(), items_.end(), by_cost);
  std::sort(out_items_.begin(), out_items_.end(), by_cost);
  // Row -> sequence, for the per-row ops.
  row_seq_.resize(n);
  for (size_t s = 0; s < batch.size(); ++s)
    for (size_t t = 0; t < batch[s].tokens.size(); ++t)
      row_seq_[seq_row_begin_[s] + t] = static_cast<uint32_t>(s);
  PlanLora(batch, n);
  return n;
}

namespace {

// Counting sort of rows [0, n) by group (group_of(i) in [0, groups) or -1 for none) into
// g->rows / g->begin; rows stay ascending within a group.
template <typename GroupOf>
void FillGroups(size_t groups, size_t n, GroupOf group_of, std::vector<uint32_t>* rows,
                std::vector<uint32_t>* begin) {
  begin->assign(groups + 1, 0);
  for (size_t i = 0; i < n; ++i)
    if (const int32_t g = group_of(i); g >= 0) ++(*begin)[static_cast<size_t>(g) + 1];
  for (size_t g = 0; g < groups; ++g) (*begin)[g + 1] += (*begin)[g];
  rows->resize((*begin)[groups]);
  // Fill with begin[g] as the cursor of group g, which leaves begin[g] at the start of g + 1;
  // shifting by one restores the starts.
  for (size_t i = 0; i < n; ++i)
    if (const int32_t g = group_of(i); g >= 0)
      (*rows)[(*begin)[static_cast<size_t>(g)]++] = static_cast<uint32_t>(i);
  for (size_t g = groups; g > 0; --g) (*begin)[g] = (*begin)[g - 1];
  (*begin)[0] = 0;
}

}  // namespace

void CpuModelRunner::PlanLora(std::span<const BatchSeq> batch, size_t n) {
  lora_adapters_.clear();
  seq_lora_.assign(batch.size(), -1);
  for (size_t s = 0; s < batch.size(); ++s) {
    const lora::Adapter* a = batch[s].lora;
    if (a == nullptr || a->num_pairs() == 0) continue;  // inert: nothing to add, base bits
    auto it = std::find(lora_adapters_.begin(), lora_adapters_.end(), a);
    if (it == lora_adapters_.end()) it = lora_adapters_.insert(it, a);
    seq_lora_[s] = static_cast<int32_t>(it - lora_adapters_.begin());
  }
  lora_moved_ = out_rows_.size() < n;
  if (lora_adapters_.empty()) return;
  row_token_.resize(n);
  for (size_t s = 0; s < batch.size(); ++s)
    std::copy(batch[s].tokens.begin(), batch[s].tokens.end(),
              row_token_.begin() + static_cast<std::ptrdiff_t>(seq_row_begin_[s]));
  const size_t g = lora_adapters_.size();
  auto of_row = [&](size_t r) { return seq_lora_[row_seq_[r]]; };
  FillGroups(g, n, of_row, &lora_all_.rows, &lora_all_.begin);
  // The last layer's moved rows (row w <- out_rows_[w]) and the output projection's rows (row w
  // <- moved row logit_rows_[w]); out_rows_ is rewritten while rows move, so plan them now.
  FillGroups(
      g, out_rows_.size(), [&](size_t w) { return of_row(out_rows_[w]); }, &lora_out_.rows,
      &lora_out_.begin);
  FillGroups(
      g, logit_rows_.size(), [&](size_t w) { return of_row(out_rows_[logit_rows_[w]]); },
      &lora_logits_.rows, &lora_logits_.begin);
}

void CpuModelRunner::AddLora(std::initializer_list<LoraIo> ios, const RowGroups& groups) {
  if (lora_adapters_.empty()) return;
  lora_jobs_.clear();
  for (const LoraIo& io : ios)
    for (size_t g = 0; g < lora_adapters_.size(); ++g) {
      const lora::Adapter& a = *lora_adapters_[g];
      const lora::LoraPair* p = io.layer == kLoraOutput      ? a.output()
                                : io.layer == kLoraTokenEmbd ? a.token_embd()
                                                             : a.Find(io.layer, io.target);
      const std::span<const uint32_t> rows = groups.Group(g);
      if (p == nullptr || rows.empty()) continue;
      lora_jobs_.push_back({p, rows, io.x, io.x_stride, io.y, io.y_stride,
                            io.layer == kLoraTokenEmbd ? row_token_.data() : nullptr});
    }
  if (!lora_jobs_.empty()) lora::AddLowRank(lora_jobs_, &lora_scratch_, pool_);
}

size_t CpuModelRunner::ForwardLayer(int l, std::span<const BatchSeq> batch, size_t n) {
  const size_t dim = static_cast<size_t>(cfg_.dim), qd = static_cast<size_t>(cfg_.q_dim());
  const size_t kvd = static_cast<size_t>(cfg_.kv_dim()), ffn = static_cast<size_t>(cfg_.ffn);
  const model::LayerWeights& L = model_.layers()[static_cast<size_t>(l)];
  auto pos_of = [&](size_t r) {
    const size_t s = row_seq_[r];
    return batch[s].start_pos + static_cast<int>(r - seq_row_begin_[s]);
  };
  ForRows(n, [&](size_t r0, size_t r1, int) {
    for (size_t r = r0; r < r1; ++r)
      kernels::RmsNorm(x_.data() + r * dim, L.attn_norm.data(), xn_.data() + r * dim, dim,
                       cfg_.rms_eps);
  });
  const kernels::MatMulOut qkv[] = {{&L.wq, q_.data()}, {&L.wk, k_.data()}, {&L.wv, v_.data()}};
  kernels::MatMulShared(qkv, xn_.data(), n, pool_);
  // LoRA deltas on the products, before bias and RoPE (llama.cpp's build_lora_mm order).
  using lora::Target;
  AddLora({{l, Target::kQ, xn_.data(), dim, q_.data(), qd},
           {l, Target::kK, xn_.data(), dim, k_.data(), kvd},
           {l, Target::kV, xn_.data(), dim, v_.data(), kvd}},
          lora_all_);
  ForRows(n, [&](size_t r0, size_t r1, int) {
    for (size_t r = r0; r < r1; ++r) {
      if (cfg_.qkv_bias) {
        kernels::Add(q_.data() + r * qd, L.bq.data(), qd);
        kernels::Add(k_.data() + r * kvd, L.bk.data(), kvd);
        kernels::Add(v_.data() + r * kvd, L.bv.data(), kvd);
      }
      rope_.Apply(q_.data() + r * qd, cfg_.n_heads, pos_of(r));
      rope_.Apply(k_.data() + r * kvd, cfg_.n_kv_heads, pos_of(r));
    }
  });
  // All K/V of this layer are stored before any attention reads them, so a sequence's later
  // tokens in the chunk see its earlier ones, and no row is read while being written.
  WriteKv(l, batch);
  // Last layer: its output feeds only the outputs, so past the K/V it runs for the output rows
  // alone (llama.cpp does the same). They are moved to rows 0..n_out-1 of att_ and x_ (row w
  // comes from row out_rows_[w] >= w, so an in-order copy never overwrites a row still to move).
  // Every op below is per row, so the output rows get exactly the bits of a full pass.
  const size_t n_out = out_rows_.size();
  if (l + 1 == cfg_.n_layers && n_out < n) {
    Attention(l, batch, out_items_);
    for (size_t w = 0; w < n_out; ++w) {
      const size_t r = out_rows_[w];
      if (r == w) continue;
      std::memcpy(att_.data() + w * qd, att_.data() + r * qd, qd * sizeof(float));
      std::memcpy(x_.data() + w * dim, x_.data() + r * dim, dim * sizeof(float));
      out_rows_[w] = w;
    }
    n = n_out;
    if (n == 0) return 0;
  } else {
    Attention(l, batch, items_);
  }
  // Past the last layer's move, the rows are the moved ones (lora_out_).
  const RowGroups& groups = l + 1 == cfg_.n_layers && lora_moved_ ? lora_out_ : lora_all_;
  kernels::MatMul(L.wo, att_.data(), n, xn_.data(), pool_);
  AddLora({{l, Target::kO, att_.data(), qd, xn_.data(), dim}}, groups);
  ForRows(n, [&](size_t r0, size_t r1, int) {
    for (size_t r = r0; r < r1; ++r) {
      kernels::Add(x_.data() + r * dim, xn_.data() + r * dim, dim);
      kernels::RmsNorm(x_.data() + r * dim, L.ffn_norm.data(), xn_.data() + r * dim, dim,
                       cfg_.rms_eps);
    }
  });
  const kernels::MatMulOut gate_up[] = {{&L.w_gate, gate_.data()}, {&L.w_up, up_.data()}};
  kernels::MatMulShared(gate_up, xn_.data(), n, pool_);
  AddLora({{l, Target::kGate, xn_.data(), dim, gate_.data(), ffn},
           {l, Target::kUp, xn_.data(), dim, up_.data(), ffn}},
          groups);
  // Row by row: SiluMul's vector body and scalar tail round differently, so a call spanning
  // several rows would make a row's result depend on where the batch's tail falls.
  ForRows(n, [&](size_t r0, size_t r1, int) {
    for (size_t r = r0; r < r1; ++r)
      kernels::SiluMul(gate_.data() + r * ffn, up_.data() + r * ffn, gate_.data() + r * ffn, ffn);
  });
  kernels::MatMul(L.w_down, gate_.data(), n, xn_.data(), pool_);
  AddLora({{l, Target::kDown, gate_.data(), ffn, xn_.data(), dim}}, groups);
  ForRows(n, [&](size_t r0, size_t r1, int) {
    kernels::Add(x_.data() + r0 * dim, xn_.data() + r0 * dim, (r1 - r0) * dim);
  });
  return n;
}

void CpuModelRunner::WriteOutputs(std::vector<float>* logits, std::vector<float>* hidden) {
  // After the last layer, output row w (of out_rows_.size()) is row w of x_.
  const size_t dim = static_cast<size_t>(cfg_.dim), n_vocab = static_cast<size_t>(cfg_.n_vocab);
  const float* norm = model_.output_norm().data();
  size_t n_hidden = 0;
  for (int64_t d : hidden_dst_) n_hidden += d >= 0 ? 1 : 0;
  if (hidden != nullptr) {
    hidden->resize(n_hidden * dim);
    ForRows(hidden_dst_.size(), [&](size_t r0, size_t r1, int) {
      for (size_t w = r0; w < r1; ++w)
        if (hidden_dst_[w] >= 0)
          kernels::RmsNorm(x_.data() + w * dim, norm,
                           hidden->data() + static_cast<size_t>(hidden_dst_[w]) * dim, dim,
                           cfg_.rms_eps);
    });
  }
  // Final norm + output projection only for the last token of each sequence that wants logits
  // (every token of a want_all_logits one), gathered into consecutive rows of xn_ so the output
  // matrix is read once.
  const size_t n_want = logit_rows_.size();
  logits->resize(n_want * n_vocab);
  if (n_want == 0) return;
  for (size_t w = 0; w < n_want; ++w)
    kernels::RmsNorm(x_.data() + logit_rows_[w] * dim, norm, xn_.data() + w * dim, dim,
                     cfg_.rms_eps);
  kernels::MatMul(model_.output(), xn_.data(), n_want, logits->data(), pool_);
  AddLora({{kLoraOutput, lora::Target::kQ, xn_.data(), dim, logits->data(), n_vocab}},
          lora_logits_);
}

Status CpuModelRunner::Run(std::span<const BatchSeq> batch, std::vector<float>* logits,
                           std::vector<float>* hidden) {
  RETURN_IF_ERROR(ValidateBatch(batch));
  if (logits == nullptr) return Status::InvalidArgument("logits output is null");
  for (size_t i = 0; i < batch.size(); ++i)
    if (batch[i].want_hidden && hidden == nullptr)
      return Status::InvalidArgument(SeqName(i, batch[i]) +
                                     " wants hidden rows but the hidden output is null");
  for (size_t i = 0; i < batch.size(); ++i)
    if (batch[i].want_hidden && batch[i].want_all_logits)
      return Status::InvalidArgument(SeqName(i, batch[i]) +
                                     " wants hidden rows and all logits (one or the other)");
  if (batch.empty()) {
    logits->clear();
    if (hidden != nullptr) hidden->clear();
    return Status::Ok();
  }
  size_t n = PlanStep(batch);
  const size_t dim = static_cast<size_t>(cfg_.dim);
  ForRows(n, [&](size_t r0, size_t r1, int) {
    for (size_t r = r0; r < r1; ++r) {
      const size_t s = row_seq_[r];
      model_.Embed(batch[s].tokens[r - seq_row_begin_[s]], x_.data() + r * dim);
    }
  });
  AddLora({{kLoraTokenEmbd, lora::Target::kQ, nullptr, 0, x_.data(), dim}}, lora_all_);
  for (int l = 0; l < cfg_.n_layers && n > 0; ++l) n = ForwardLayer(l, batch, n);
  WriteOutputs(logits, hidden);
  return Status::Ok();
}

}  // namespace strata::engine::runner
