// The llm.c token shard formats, shared by the reader (token_shards.cpp) and the writer
// (shard_writer.cpp): a header of 256 little-endian int32 — magic, version, token count, then
// zeros — followed by that many tokens. GPT-2's format (magic 20240520, version 1) holds uint16
// tokens; Llama 3's (magic 20240801, version 7) holds uint32 tokens, for vocabularies past 65,535.
#pragma once

#include <cstddef>
#include <cstdint>

namespace keel {

struct ShardFormat {
  int32_t magic;
  int32_t version;
  size_t token_bytes;  // 2: uint16 tokens, 4: uint32
};

constexpr ShardFormat kShardFormatU16{20240520, 1, 2};
constexpr ShardFormat kShardFormatU32{20240801, 7, 4};
constexpr int64_t kShardU16MaxVocabulary = 65535;  // a vocabulary past this is written as uint32

// The format prepare-data writes for a vocabulary of `vocab_size` tokens.
constexpr ShardFormat shard_format_for(int64_t vocab_size) {
  return vocab_size > kShardU16MaxVocabulary ? kShardFormatU32 : kShardFormatU16;
}

// Keel's shard of learned and unlearned tokens (chat data, docs/data.md §1): the same header with
// magic 20261128 and version 1, then header[3] the token width in bytes (2 or 4), header[4] flags
// (bit 0: a loss mask follows the tokens; bit 1: packed, several conversations per sample), header[5] the sample length it was laid out for (one
// conversation every seq_len tokens; 0: none), header[8..15] the tokenizer's identity (the SHA-256 of
// its tokenizer.json, 32 bytes; all zero: not recorded). After the tokens, one byte per token:
// bit 0 set where the token is learned as a target, clear where it is not (a prompt's token,
// padding); in a packed shard bit 1 set on each conversation's first token, where positions restart
// and attention stops looking back.
constexpr int32_t kMaskedShardMagic = 20261128;
constexpr int32_t kMaskedShardVersion = 1;
constexpr int32_t kMaskedShardHasMask = 1;
constexpr int32_t kMaskedShardPacked = 2;
constexpr uint8_t kMaskLearned = 1;
constexpr uint8_t kMaskDocumentStart = 2;
constexpr size_t kShardIdentityInt = 8, kShardIdentityBytes = 32;

constexpr size_t kShardHeaderInts = 256;
constexpr size_t kShardHeaderBytes = kShardHeaderInts * sizeof(int32_t);
constexpr int64_t kShardMaxTokens = INT32_MAX;  // the count is an int32

}  // namespace keel
