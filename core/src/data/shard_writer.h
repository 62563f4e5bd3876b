// Writes one split of a dataset as llm.c token shards DIR/<split>_000000.bin, _000001.bin, ...
// of at most max_tokens_per_shard tokens each. Each shard is written under a hidden temporary
// name and renamed when complete, so a reader (or a glob) never sees a half-written shard.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace keel {

class ShardWriter {
 public:
  ShardWriter(std::string dir, std::string split, int64_t max_tokens_per_shard);
  ~ShardWriter();  // removes an unfinished temporary file
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  void append(const uint16_t* tokens, int64_t count);
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
  std::FILE* file_ = nullptr;
  std::string temp_path_;
  int64_t shard_tokens_ = 0;
  int64_t total_tokens_ = 0;
  std::vector<std::string> files_;
};

}  // namespace keel
