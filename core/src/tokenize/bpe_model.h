// The BPE model of a tokenizer.json: a vocabulary, rank-ordered merges, and what to do with a
// character the vocabulary lacks (byte fallback to <0xNN> tokens, else unk). It turns one
// pre-token ("word") into ids; normalizing and pre-tokenizing happen before (json_tokenizer.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace keel {

struct BpeSpec {
  std::unordered_map<std::string, uint32_t> vocab;           // model.vocab
  std::vector<std::pair<std::string, std::string>> merges;   // model.merges, rank = index
  std::optional<uint32_t> unk_id;                            // model.unk_token's id
  bool fuse_unk = false;        // consecutive unknown characters become one unk
  bool byte_fallback = false;   // an unknown character becomes its UTF-8 bytes' <0xNN> tokens
  bool ignore_merges = false;   // a word that is itself in the vocabulary is one token
};

class BpeModel {
 public:
  // Merges name tokens of the vocabulary (the loader has checked that); throws otherwise.
  explicit BpeModel(BpeSpec spec);

  // Appends the ids of one word, given as UTF-8 characters. Throws KeelError naming `where`
  // when a character is not in the vocabulary and neither byte fallback nor unk covers it.
  void encode_word(std::string_view word, const std::string& where, std::vector<uint32_t>& ids) const;

  // Applies the merges to a word's symbol ids in place: always the lowest-ranked pair present,
  // the leftmost of equal ranks, until no pair merges.
  void merge(std::vector<uint32_t>& symbols) const;

  const std::unordered_map<std::string, uint32_t>& vocab() const { return spec_.vocab; }

 private:
  struct Merge {
    uint32_t rank;
    uint32_t merged_id;
  };
  const Merge* find_merge(uint32_t left, uint32_t right) const;
  void initial_symbols(std::string_view word, const std::string& where, std::vector<uint32_t>& symbols) const;

  BpeSpec spec_;
  std::unordered_map<uint64_t, Merge> merges_;  // (left id << 32 | right id) → rank, merged id
  uint32_t byte_fallback_ids_[256] = {};
  bool byte_token_present_[256] = {};
  // Words seen before and their ids; tokenizing is single-threaded, hence mutable without a lock.
  mutable std::unordered_map<std::string, std::vector<uint32_t>> cache_;
};

}  // namespace keel
