// Writes one split of a dataset as llm.c token shards DIR/<split>_000000.bin, _000001.bin, ...
// of at most max_tokens_per_shard tokens each, in one of llm.c's two formats (shard_format.h). Each shard is written under a hidden temporary
// name and renamed when complete, so a reader (or a glob) never sees a half-written shard.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "data/shard_format.h"

namespace keel {

class ShardWriter {
 public:
  ShardWriter(std::string dir, std::string split, int64_t max_tokens_per_shard, ShardFormat format = kShardFormatU16);
  ~ShardWriter();  // removes an unfinished temporary file
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // Throws KeelError (internal) for a token that does not fit the format's width.
  void append(const uint32_t* tokens, int64_t count);
  // Completes the last shard. A split that received no tokens writes no file.
  void finish();

  int64_t tokens() const { return total_tokens_; }
  const std::vector<std::string>& files() const { return files_; }
  // DIR/<split>_NNNNNN.bin
  static std::string shard_path(const std::string& dir, const std::string& split, int64_t index);

 private:
  void open_shard();
  void close_shard();

  std::string dir_, split_;
  int64_t max_tokens_;
  ShardFormat format_;
  std::vector<uint16_t> narrow_;  // a uint16 shard's tokens on their way out
  std::FILE* file_ = nullptr;
  std::string temp_path_;
  int64_t shard_tokens_ = 0;
  int64_t total_tokens_ = 0;
  std::vector<std::string> files_;
};

}  // namespace keel
