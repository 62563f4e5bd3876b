// llm.c token shards: a header of 256 int32 (magic 20240520, version 1, token count) followed
// by uint16 tokens, memory-mapped. The shards matching a glob, sorted, form one source whose
// shard boundaries the sampler respects.
#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "config/run_config.h"
#include "data/shard_format.h"
#include "data/token_source.h"
#include "host/errors.h"
#include "io/regular_file.h"

namespace keel {
namespace {

constexpr size_t kHeaderBytes = kShardHeaderBytes;

struct MappedShard {
  std::string path;
  const uint16_t* tokens = nullptr;
  int64_t count = 0;
  void* mapping = nullptr;
  size_t mapping_bytes = 0;
};

MappedShard map_shard(const std::string& path) {
  int fd = open_regular_file(path, "token shard");  // a FIFO or device would block or never end
  struct stat st {};
  ::fstat(fd, &st);
  const size_t bytes = size_t(st.st_size);
  if (bytes < kHeaderBytes) {
    ::close(fd);
    throw KeelError(KEEL_ERR_IO, path + ": truncated token shard: " + std::to_string(bytes) +
                                     " bytes, smaller than the 1024-byte header");
  }
  void* mapping = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (mapping == MAP_FAILED) throw KeelError(KEEL_ERR_IO, path + ": mmap failed");
  const int32_t* header = static_cast<const int32_t*>(mapping);
  auto fail = [&](const std::string& why) {
    ::munmap(mapping, bytes);
    throw KeelError(KEEL_ERR_IO, path + ": " + why);
  };
  if (header[0] != kShardMagic)
    fail("offset 0: bad magic " + std::to_string(header[0]) + ", expected " + std::to_string(kShardMagic) +
         " (an llm.c token shard)");
  if (header[1] != kShardVersion)
    fail("offset 4: unsupported version " + std::to_string(header[1]) + ", expected " + std::to_string(kShardVersion));
  const int64_t count = header[2];
  if (count < 0 || kHeaderBytes + size_t(count) * 2 > bytes)
    fail("truncated: the header promises " + std::to_string(count) + " tokens (" +
         std::to_string(kHeaderBytes + size_t(count) * 2) + " bytes) but the file has " + std::to_string(bytes) + " bytes");
  MappedShard shard;
  shard.path = path;
  shard.tokens = reinterpret_cast<const uint16_t*>(static_cast<const char*>(mapping) + kHeaderBytes);
  shard.count = count;
  shard.mapping = mapping;
  shard.mapping_bytes = bytes;
  return shard;
}

class ShardSource : public TokenSource {
 public:
  explicit ShardSource(const std::vector<std::string>& paths, std::string what) : what_(std::move(what)) {
    for (const auto& path : paths) {
      shards_.push_back(map_shard(path));
      starts_.push_back(total_);
      total_ += shards_.back().count;
      const MappedShard& shard = shards_.back();
      for (int64_t i = 0; i < shard.count; ++i) max_token_ = std::max<int32_t>(max_token_, shard.tokens[i]);
    }
  }
  ~ShardSource() override {
    for (auto& shard : shards_) ::munmap(shard.mapping, shard.mapping_bytes);
  }
  int64_t num_tokens() const override { return total_; }
  int32_t max_token() const override { return max_token_; }
  void read(int64_t start, int64_t count, int32_t* out) const override {
    size_t shard = size_t(std::upper_bound(starts_.begin(), starts_.end(), start) - starts_.begin()) - 1;
    int64_t offset = start - starts_[shard];
    for (int64_t i = 0; i < count; ++i, ++offset) {
      while (offset >= shards_[shard].count) offset -= shards_[shard++].count;
      out[i] = shards_[shard].tokens[offset];
    }
  }
  std::string describe() const override { return what_; }
  std::vector<int64_t> shard_token_counts() const override {
    std::vector<int64_t> counts;
    for (const auto& shard : shards_) counts.push_back(shard.count);
    return counts;
  }
  // The file and byte offset of the first token >= vocabulary, or "" if none.
  std::string find_token_at_least(int32_t vocabulary) const {
    for (const auto& shard : shards_)
      for (int64_t i = 0; i < shard.count; ++i)
        if (shard.tokens[i] >= vocabulary)
          return shard.path + ": offset " + std::to_string(kHeaderBytes + size_t(i) * 2) + ": token " +
                 std::to_string(shard.tokens[i]);
    return "";
  }

 private:
  std::vector<MappedShard> shards_;
  std::vector<int64_t> starts_;
  int64_t total_ = 0;
  int32_t max_token_ = 0;
  std::string what_;
};

std::vector<std::string> glob_files(const std::string& pattern, const std::string& json_path) {
  glob_t matches{};
  std::vector<std::string> files;
  if (::glob(pattern.c_str(), 0, nullptr, &matches) == 0)
    for (size_t i = 0; i < matches.gl_pathc; ++i) files.push_back(matches.gl_pathv[i]);
  ::globfree(&matches);
  if (files.empty()) throw KeelError(KEEL_ERR_NOT_FOUND, json_path + ": no token shard matches " + pattern);
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

DataSplits open_shard_data(const DataConfig& config) {
  DataSplits splits;
  splits.train = std::make_shared<ShardSource>(glob_files(config.train_pattern, "data.train"), "shards " + config.train_pattern);
  const std::string val = config.val_pattern.empty() ? config.train_pattern : config.val_pattern;
  splits.val = std::make_shared<ShardSource>(glob_files(val, "data.val"), "shards " + val);
  return splits;
}

std::string shard_token_out_of_range(const TokenSource& source, int32_t vocabulary) {
  auto shards = dynamic_cast<const ShardSource*>(&source);
  return shards ? shards->find_token_at_least(vocabulary) : "";
}

}  // namespace keel
