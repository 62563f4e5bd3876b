// The llm.c token shard format, shared by the reader (token_shards.cpp) and the writer
// (shard_writer.cpp): a header of 256 little-endian int32 — magic, version, token count, then
// zeros — followed by that many uint16 tokens.
#pragma once

#include <cstddef>
#include <cstdint>

namespace keel {

constexpr int32_t kShardMagic = 20240520;
constexpr int32_t kShardVersion = 1;
constexpr size_t kShardHeaderInts = 256;
constexpr size_t kShardHeaderBytes = kShardHeaderInts * sizeof(int32_t);
constexpr int64_t kShardMaxTokens = INT32_MAX;  // the count is an int32

}  // namespace keel
