// The BPE merge loop. Why a priority queue and not the simple loop (scan every adjacent pair,
// merge the best, repeat): SentencePiece-style tokenizers (Llama 2) have no pre-tokenizer, so a
// whole document between two special tokens is one word, and the simple loop is quadratic in
// it. A min-queue of (rank, position) over a linked list of symbols is O(n log n) and picks
// exactly what the simple loop picks: the lowest rank, then the leftmost. Entries go stale when
// a neighbour merges first; they are recognised when popped (the pair no longer merges into the
// same token) and dropped. Short words (the usual pre-token) are cached.
#include "tokenize/bpe_model.h"

#include <cstdio>
#include <queue>

#include "host/errors.h"

namespace keel {
namespace {

constexpr size_t kCachedWordMaxBytes = 256;
constexpr size_t kCacheMaxWords = size_t(1) << 20;
constexpr uint32_t kMerged = UINT32_MAX;  // a symbol swallowed by its left neighbour

uint64_t pair_key(uint32_t left, uint32_t right) { return uint64_t(left) << 32 | right; }

size_t utf8_length(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

std::string code_point_name(std::string_view character) {
  uint32_t cp = static_cast<unsigned char>(character[0]);
  if (character.size() > 1) {
    cp &= 0x7F >> character.size();
    for (size_t i = 1; i < character.size(); ++i) cp = cp << 6 | (static_cast<unsigned char>(character[i]) & 0x3F);
  }
  char name[16];
  std::snprintf(name, sizeof(name), "U+%04X", cp);
  return name;
}

}  // namespace

BpeModel::BpeModel(BpeSpec spec) : spec_(std::move(spec)) {
  merges_.reserve(spec_.merges.size());
  for (size_t rank = 0; rank < spec_.merges.size(); ++rank) {
    const auto& [left, right] = spec_.merges[rank];
    auto l = spec_.vocab.find(left), r = spec_.vocab.find(right), m = spec_.vocab.find(left + right);
    if (l == spec_.vocab.end() || r == spec_.vocab.end() || m == spec_.vocab.end())
      throw KeelError(KEEL_ERR_INTERNAL, "BPE merge " + std::to_string(rank) + " names a token outside the vocabulary");
    merges_.emplace(pair_key(l->second, r->second), Merge{uint32_t(rank), m->second});
  }
  for (int b = 0; b < 256 && spec_.byte_fallback; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    auto it = spec_.vocab.find(name);
    byte_token_present_[b] = it != spec_.vocab.end();
    if (byte_token_present_[b]) byte_fallback_ids_[b] = it->second;
  }
}

const BpeModel::Merge* BpeModel::find_merge(uint32_t left, uint32_t right) const {
  auto it = merges_.find(pair_key(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

// One symbol per character of the vocabulary; a character outside it becomes its bytes'
// <0xNN> tokens when every one exists, else unk (fused with an unk just before it when
// fuse_unk). As in the tokenizers library, a pending unk is only written out when a known
// character or the end of the word follows, not before byte-fallback tokens.
void BpeModel::initial_symbols(std::string_view word, const std::string& where, std::vector<uint32_t>& symbols) const {
  bool unk_pending = false;
  std::string character;
  for (size_t i = 0; i < word.size();) {
    const size_t n = std::min(utf8_length(static_cast<unsigned char>(word[i])), word.size() - i);
    character.assign(word.data() + i, n);
    i += n;
    auto known = spec_.vocab.find(character);
    if (known != spec_.vocab.end()) {
      if (unk_pending) symbols.push_back(*spec_.unk_id), unk_pending = false;
      symbols.push_back(known->second);
      continue;
    }
    if (spec_.byte_fallback) {
      bool all = true;
      for (unsigned char b : character) all = all && byte_token_present_[b];
      if (all) {
        for (unsigned char b : character) symbols.push_back(byte_fallback_ids_[b]);
        continue;
      }
    }
    if (!spec_.unk_id)
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT,
                      where + ": the character " + code_point_name(character) +
                          " is not in the tokenizer's vocabulary, which has no unk_token" +
                          (spec_.byte_fallback ? " and no <0xNN> token for each of its bytes" : "") +
                          " (the tokenizers library would drop it silently)");
    if (unk_pending && !spec_.fuse_unk) symbols.push_back(*spec_.unk_id);
    unk_pending = true;
  }
  if (unk_pending) symbols.push_back(*spec_.unk_id);
}

void BpeModel::merge(std::vector<uint32_t>& symbols) const {
  const size_t n = symbols.size();
  if (n < 2) return;
  struct Candidate {
    uint32_t rank, left, merged_id;  // left: the position of the pair's left symbol
  };
  auto later = [](const Candidate& a, const Candidate& b) { return a.rank != b.rank ? a.rank > b.rank : a.left > b.left; };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(later)> queue(later);
  std::vector<uint32_t> prev(n), next(n);  // neighbours in the live list; n means none
  for (size_t i = 0; i < n; ++i) prev[i] = i == 0 ? uint32_t(n) : uint32_t(i - 1), next[i] = uint32_t(i + 1);
  auto offer = [&](uint32_t left) {
    if (const Merge* m = find_merge(symbols[left], symbols[next[left]])) queue.push({m->rank, left, m->merged_id});
  };
  for (uint32_t i = 0; i + 1 < n; ++i) offer(i);
  while (!queue.empty()) {
    const Candidate best = queue.top();
    queue.pop();
    const uint32_t left = best.left, right = next[left];
    if (symbols[left] == kMerged || right == n) continue;
    const Merge* m = find_merge(symbols[left], symbols[right]);
    if (!m || m->merged_id != best.merged_id) continue;  // stale: a neighbour merged first
    symbols[left] = best.merged_id;
    symbols[right] = kMerged;
    next[left] = next[right];
    if (next[left] != n) prev[next[left]] = left;
    if (prev[left] != n) offer(prev[left]);
    if (next[left] != n) offer(left);
  }
  size_t kept = 0;
  for (size_t i = 0; i < n; ++i)
    if (symbols[i] != kMerged) symbols[kept++] = symbols[i];
  symbols.resize(kept);
}

void BpeModel::encode_word(std::string_view word, const std::string& where, std::vector<uint32_t>& ids) const {
  if (word.empty()) return;
  if (spec_.ignore_merges) {
    auto whole = spec_.vocab.find(std::string(word));
    if (whole != spec_.vocab.end()) {
      ids.push_back(whole->second);
      return;
    }
  }
  const bool cacheable = word.size() <= kCachedWordMaxBytes;
  std::string key;
  if (cacheable) {
    key.assign(word);
    auto hit = cache_.find(key);
    if (hit != cache_.end()) {
      ids.insert(ids.end(), hit->second.begin(), hit->second.end());
      return;
    }
  }
  std::vector<uint32_t> symbols;
  symbols.reserve(word.size());
  initial_symbols(word, where, symbols);
  merge(symbols);
  ids.insert(ids.end(), symbols.begin(), symbols.end());
  if (cacheable) {
    if (cache_.size() >= kCacheMaxWords) cache_.clear();
    cache_.emplace(std::move(key), std::move(symbols));
  }
}

}  // namespace keel
