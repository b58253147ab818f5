// Internal to tokenizer/: the pair-merge loop that SPM (spm.cc) and byte-level BPE (bpe.cc) share.
// A word starts as its UTF-8 characters; the adjacent pair that ranks first is merged into one
// symbol, again and again, until no adjacent pair has a rank. The tokenizers differ only in how a
// pair is ranked (SPM: the score of the token the pair spells, highest first; BPE: the rank of
// the merge "left right", lowest first), which the caller passes in.
// Header-only, pure (no state outside the call); one heap array and one queue per word.
#pragma once

#include <algorithm>
#include <optional>
#include <queue>
#include <string_view>
#include <vector>

#include "tokenizer/utf8.h"

namespace strata::tokenizer::internal {

// Merges `word` pair by pair and calls `emit(piece)` for each final symbol, left to right.
// `rank(pair, left_len)` -> std::optional<Rank>: the rank of merging the two adjacent symbols
// spelled by `pair` (the left one is its first `left_len` bytes), or nullopt if they never merge.
// `Worse(a, b)`: true if rank `a` merges after rank `b`; equal ranks merge leftmost first.
template <typename Rank, typename Worse, typename RankFn, typename EmitFn>
void MergePairs(std::string_view word, const RankFn& rank, const EmitFn& emit) {
  if (word.empty()) return;
  struct Symbol {
    int prev, next;
    size_t off, len;  // len 0: merged into its left neighbour
  };
  std::vector<Symbol> syms;
  for (size_t off = 0; off < word.size();) {
    const size_t len = std::min(Utf8SeqLen(static_cast<uint8_t>(word[off])), word.size() - off);
    const int idx = static_cast<int>(syms.size());
    syms.push_back({idx - 1, off + len == word.size() ? -1 : idx + 1, off, len});
    off += len;
  }
  struct Bigram {
    int left, right;
    Rank rank;
    size_t left_len, right_len;
  };
  auto cmp = [](const Bigram& a, const Bigram& b) {  // true if a has lower priority than b
    return Worse{}(a.rank, b.rank) || (a.rank == b.rank && a.left > b.left);
  };
  std::priority_queue<Bigram, std::vector<Bigram>, decltype(cmp)> queue(cmp);
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = syms[left];
    const Symbol& r = syms[right];
    const std::optional<Rank> pair_rank = rank(word.substr(l.off, l.len + r.len), l.len);
    if (pair_rank) queue.push({left, right, *pair_rank, l.len, r.len});
  };
  for (int i = 1; i < static_cast<int>(syms.size()); ++i) try_add(i - 1, i);
  while (!queue.empty()) {
    const Bigram bg = queue.top();
    queue.pop();
    Symbol& l = syms[bg.left];
    Symbol& r = syms[bg.right];
    // Stale if either side changed since the pair was queued (symbols only grow or vanish).
    if (l.len != bg.left_len || r.len != bg.right_len || l.next != bg.right) continue;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) syms[r.next].prev = bg.left;
    try_add(l.prev, bg.left);
    try_add(bg.left, l.next);
  }
  for (int i = 0; i != -1; i = syms[i].next) emit(word.substr(syms[i].off, syms[i].len));
}

}  // namespace strata::tokenizer::internal
