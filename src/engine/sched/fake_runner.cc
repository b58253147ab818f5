#include "engine/sched/fake_runner.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace strata::engine::sched {

using runner::BatchSeq;

namespace {
constexpr uint64_t kChainInit = 0x9E3779B97F4A7C15ull;

uint64_t Mix64(uint64_t x) {  // splitmix64 finaliser
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
}  // namespace

FakeModelRunner::FakeModelRunner(const FakeRunnerConfig& config) : cfg_(config) {
  slots_.resize(static_cast<size_t>(cfg_.num_blocks) * static_cast<size_t>(cfg_.block_size));
}

uint64_t FakeModelRunner::Mix(uint64_t h, int32_t token, int32_t pos) {
  return Mix64(h ^ Mix64((static_cast<uint64_t>(static_cast<uint32_t>(token)) << 32) |
                         static_cast<uint32_t>(pos)));
}

uint64_t FakeModelRunner::LoraTag(const lora::Adapter* adapter) {
  if (adapter == nullptr) return 0;
  uint64_t h = kChainInit;
  for (unsigned char c : adapter->digest()) h = Mix64(h ^ c);
  return h | 1;  // never 0 (the base model's tag)
}

uint64_t FakeModelRunner::ChainInit(const lora::Adapter* adapter) {
  return adapter == nullptr ? kChainInit : Mix64(kChainInit ^ LoraTag(adapter));
}

uint64_t FakeModelRunner::Chain(std::span<const int32_t> tokens, const lora::Adapter* adapter) {
  uint64_t h = ChainInit(adapter);
  for (size_t p = 0; p < tokens.size(); ++p) h = Mix(h, tokens[p], static_cast<int32_t>(p));
  return h;
}

void FakeModelRunner::Logits(uint64_t chain, int pos, std::span<float> out) const {
  const uint64_t base = Mix64(chain ^ Mix64(cfg_.seed) ^ static_cast<uint64_t>(pos));
  const size_t v = out.size();
  for (size_t i = 0; i < v; ++i) {
    out[i] = static_cast<float>(Mix64(base + i) >> 40) / static_cast<float>(1 << 24);  // [0, 1)
  }
  out[base % v] += cfg_.peak;
  out[Mix64(base) % v] += cfg_.peak * 0.5f;
}

void FakeModelRunner::Hidden(uint64_t chain, int pos, std::span<float> out) const {
  const uint64_t base = Mix64(chain ^ Mix64(cfg_.seed + 1) ^ (static_cast<uint64_t>(pos) << 20));
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<float>(Mix64(base + i) >> 40) / static_cast<float>(1 << 23) - 1.0f;
}

Status FakeModelRunner::Fail(const std::string& msg) {
  ++num_errors_;
  return Status::Internal("fake runner: " + msg);
}

void FakeModelRunner::CopyBlocks(std::span<const BlockCopy> copies) {
  for (const BlockCopy& c : copies) {
    for (int s = 0; s < c.num_slots; ++s) At(c.dst, s) = At(c.src, s);
    ++num_copies_;
  }
}

std::vector<uint8_t> FakeModelRunner::ExportBlock(int32_t block) const {
  std::vector<uint8_t> out(sizeof(Slot) * static_cast<size_t>(cfg_.block_size));
  for (int s = 0; s < cfg_.block_size; ++s)
    std::memcpy(out.data() + sizeof(Slot) * static_cast<size_t>(s), &At(block, s), sizeof(Slot));
  return out;
}

void FakeModelRunner::ImportBlock(int32_t block, const std::vector<uint8_t>& bytes) {
  if (bytes.size() != sizeof(Slot) * static_cast<size_t>(cfg_.block_size)) return;
  for (int s = 0; s < cfg_.block_size; ++s)
    std::memcpy(&At(block, s), bytes.data() + sizeof(Slot) * static_cast<size_t>(s), sizeof(Slot));
}

Status FakeModelRunner::Run(std::span<const BatchSeq> batch, std::vector<float>* logits,
                            std::vector<float>* hidden) {
  if (record_) {
    RecordedBatch rb;
    rb.reserve(batch.size());
    for (const BatchSeq& b : batch)
      rb.push_back(RecordedSeq{b.seq_id, b.start_pos, static_cast<int>(b.tokens.size()),
                               b.want_logits, b.want_hidden, b.want_all_logits, b.lora});
    batches_.push_back(std::move(rb));
  }
  const int bs = cfg_.block_size;
  writer_.assign(static_cast<size_t>(cfg_.num_blocks), -1);
  mapper_.assign(static_cast<size_t>(cfg_.num_blocks), -1);
  size_t rows = 0, hidden_rows = 0;
  // Validate everything before writing anything.
  for (size_t i = 0; i < batch.size(); ++i) {
    const BatchSeq& b = batch[i];
    const std::string who = "seq " + std::to_string(b.seq_id);
    if (b.tokens.empty()) return Fail(who + ": empty chunk");
    for (size_t j = 0; j < i; ++j)
      if (batch[j].seq_id == b.seq_id) return Fail(who + ": appears twice in one batch");
    for (int32_t t : b.tokens)
      if (t < 0 || t >= cfg_.n_vocab)
        return Fail(who + ": token " + std::to_string(t) + " out of range");
    const int end = b.start_pos + static_cast<int>(b.tokens.size());
    if (b.start_pos < 0) return Fail(who + ": negative start_pos");
    if (static_cast<size_t>((end - 1) / bs) >= b.block_table.size()) {
      return Fail(who + ": position " + std::to_string(end - 1) +
                  " not covered by its block table (" + std::to_string(b.block_table.size()) +
                  " blocks)");
    }
    for (int32_t blk : b.block_table) {
      if (blk < 0 || blk >= cfg_.num_blocks)
        return Fail(who + ": block id " + std::to_string(blk) + " out of range");
      int32_t& m = mapper_[static_cast<size_t>(blk)];
      if (m == static_cast<int32_t>(i))
        return Fail(who + ": maps block " + std::to_string(blk) + " twice");
      m = m == -1 ? static_cast<int32_t>(i) : -2;
    }
    if (auto it = next_pos_.find(b.seq_id); it != next_pos_.end() && it->second != b.start_pos) {
      return Fail(who + ": chunk starts at " + std::to_string(b.start_pos) +
                  " but its KV ends at " + std::to_string(it->second) +
                  " (reused or skipped positions)");
    }
    const int first_check = cfg_.verify_history ? 0 : std::max(0, b.start_pos - 1);
    for (int q = first_check; q < b.start_pos; ++q) {
      const Slot& s = At(b.block_table[static_cast<size_t>(q / bs)], q % bs);
      if (s.pos != q) {
        return Fail(who + ": reads position " + std::to_string(q) +
                    " but its slot holds position " + std::to_string(s.pos));
      }
      if (s.lora != LoraTag(b.lora)) {
        return Fail(who + ": reads position " + std::to_string(q) +
                    " computed with another adapter (a block crossed adapters)");
      }
    }
    rows += b.logit_rows();
    if (b.want_hidden) {
      if (hidden == nullptr || cfg_.hidden_dim <= 0)
        return Fail(who + ": wants hidden rows the runner cannot give");
      hidden_rows += b.tokens.size();
    }
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    const BatchSeq& b = batch[i];
    const int end = b.start_pos + static_cast<int>(b.tokens.size());
    for (int p = b.start_pos; p < end; ++p) {
      const int32_t blk = b.block_table[static_cast<size_t>(p / bs)];
      if (mapper_[static_cast<size_t>(blk)] == -2)
        return Fail("seq " + std::to_string(b.seq_id) + ": writes block " + std::to_string(blk) +
                    " that another sequence of the batch maps (missing copy-on-write)");
      int32_t& w = writer_[static_cast<size_t>(blk)];
      if (w != -1 && w != static_cast<int32_t>(i))
        return Fail("seq " + std::to_string(b.seq_id) + ": writes block " + std::to_string(blk) +
                    " written by another");
      w = static_cast<int32_t>(i);
    }
  }
  logits->resize(rows * static_cast<size_t>(cfg_.n_vocab));
  const size_t hd = static_cast<size_t>(std::max(cfg_.hidden_dim, 0));
  if (hidden != nullptr) hidden->resize(hidden_rows * hd);
  size_t row = 0, hidden_row = 0;
  for (const BatchSeq& b : batch) {
    const uint64_t tag = LoraTag(b.lora);
    uint64_t h = ChainInit(b.lora);
    if (b.start_pos > 0) {
      const int q = b.start_pos - 1;
      h = At(b.block_table[static_cast<size_t>(q / bs)], q % bs).chain;
    }
    int p = b.start_pos;
    for (int32_t t : b.tokens) {
      h = Mix(h, t, p);
      At(b.block_table[static_cast<size_t>(p / bs)], p % bs) = Slot{p, t, h, tag};
      if (b.want_hidden) Hidden(h, p, std::span<float>(hidden->data() + hidden_row++ * hd, hd));
      if (b.want_all_logits) {
        Logits(h, p,
               std::span<float>(logits->data() + row * static_cast<size_t>(cfg_.n_vocab),
                                static_cast<size_t>(cfg_.n_vocab)));
        ++row;
      }
      ++p;
    }
    next_pos_[b.seq_id] = p;
    if (b.want_logits && !b.want_all_logits) {
      Logits(h, p - 1,
             std::span<float>(logits->data() + row * static_cast<size_t>(cfg_.n_vocab),
                              static_cast<size_t>(cfg_.n_vocab)));
      ++row;
    }
  }
  return Status::Ok();
}

}  // namespace strata::engine::sched
