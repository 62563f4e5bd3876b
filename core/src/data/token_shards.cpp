// llm.c token shards: a header of 256 int32 (magic 20240520, version 1, token count) followed
// by uint16 tokens. The shards matching a glob, sorted, form one source whose shard boundaries
// the sampler respects. Tokens are read with pread, not through a memory map: a shard cut
// short while a run reads it (a copy still in progress, a full disk) then gives an error
// naming the shard instead of a SIGBUS with no message.
#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "config/run_config.h"
#include "data/shard_format.h"
#include "data/token_source.h"
#include "host/errors.h"
#include "io/regular_file.h"

namespace keel {
namespace {

constexpr size_t kHeaderBytes = kShardHeaderBytes;
constexpr int64_t kScanChunkTokens = int64_t(1) << 20;  // tokens per pread while scanning a whole shard

// One open shard file. Copies share the descriptor; the source closes it.
struct ShardFile {
  std::string path;
  int fd = -1;
  int64_t count = 0;  // tokens the header promises (checked against the size at open)

  // Tokens [first, first+n) of this shard. Throws KeelError naming the shard when the file no
  // longer holds them.
  void read_tokens(int64_t first, int64_t n, uint16_t* out) const {
    const size_t want = size_t(n) * sizeof(uint16_t);
    const off_t offset = off_t(kHeaderBytes + size_t(first) * sizeof(uint16_t));
    size_t got = 0;
    while (got < want) {
      const ssize_t r = ::pread(fd, reinterpret_cast<char*>(out) + got, want - got, offset + off_t(got));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) throw KeelError(KEEL_ERR_IO, path + ": reading tokens at offset " + std::to_string(offset) + " failed: " +
                                                  std::strerror(errno));
      if (r == 0)
        throw KeelError(KEEL_ERR_IO, path + ": the token shard was truncated while the run was reading it: " +
                                         std::to_string(want) + " bytes wanted at offset " + std::to_string(offset) +
                                         ", the file ends after " + std::to_string(offset + off_t(got)) +
                                         " (the header promised " + std::to_string(count) + " tokens)");
      got += size_t(r);
    }
  }

  // Calls visit(index, token) for every token, in chunks.
  template <typename Visit>
  void scan(Visit&& visit) const {
    std::vector<uint16_t> chunk;
    for (int64_t first = 0; first < count; first += kScanChunkTokens) {
      const int64_t n = std::min(kScanChunkTokens, count - first);
      chunk.resize(size_t(n));
      read_tokens(first, n, chunk.data());
      for (int64_t i = 0; i < n; ++i)
        if (!visit(first + i, chunk[size_t(i)])) return;
    }
  }
};

ShardFile open_shard(const std::string& path) {
  int fd = open_regular_file(path, "token shard");  // a FIFO or device would block or never end
  auto fail = [&](const std::string& why) {
    ::close(fd);
    throw KeelError(KEEL_ERR_IO, path + ": " + why);
  };
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail(std::string("cannot stat token shard: ") + std::strerror(errno));
  const size_t bytes = size_t(st.st_size);
  if (bytes < kHeaderBytes)
    fail("truncated token shard: " + std::to_string(bytes) + " bytes, smaller than the 1024-byte header");
  int32_t header[kShardHeaderInts];
  if (::pread(fd, header, kHeaderBytes, 0) != ssize_t(kHeaderBytes)) fail("cannot read the 1024-byte header");
  if (header[0] != kShardMagic)
    fail("offset 0: bad magic " + std::to_string(header[0]) + ", expected " + std::to_string(kShardMagic) +
         " (an llm.c token shard)");
  if (header[1] != kShardVersion)
    fail("offset 4: unsupported version " + std::to_string(header[1]) + ", expected " + std::to_string(kShardVersion));
  const int64_t count = header[2];
  if (count < 0 || kHeaderBytes + size_t(count) * 2 > bytes)
    fail("truncated: the header promises " + std::to_string(count) + " tokens (" +
         std::to_string(kHeaderBytes + size_t(count) * 2) + " bytes) but the file has " + std::to_string(bytes) + " bytes");
  return {path, fd, count};
}

class ShardSource : public TokenSource {
 public:
  explicit ShardSource(const std::vector<std::string>& paths, std::string what) : what_(std::move(what)) {
    try {
      for (const auto& path : paths) {
        shards_.push_back(open_shard(path));
        starts_.push_back(total_);
        total_ += shards_.back().count;
        shards_.back().scan([&](int64_t, uint16_t token) {
          max_token_ = std::max<int32_t>(max_token_, token);
          return true;
        });
      }
    } catch (...) {
      close_all();
      throw;
    }
  }
  ~ShardSource() override { close_all(); }
  int64_t num_tokens() const override { return total_; }
  int32_t max_token() const override { return max_token_; }
  void read(int64_t start, int64_t count, int32_t* out) const override {
    size_t shard = size_t(std::upper_bound(starts_.begin(), starts_.end(), start) - starts_.begin()) - 1;
    int64_t offset = start - starts_[shard];
    std::vector<uint16_t> tokens;
    while (count > 0) {
      while (offset >= shards_[shard].count) offset -= shards_[shard++].count;
      const int64_t n = std::min(count, shards_[shard].count - offset);
      tokens.resize(size_t(n));
      shards_[shard].read_tokens(offset, n, tokens.data());
      std::copy(tokens.begin(), tokens.end(), out);
      out += n, count -= n, offset += n;
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
    std::string found;
    for (const auto& shard : shards_) {
      shard.scan([&](int64_t i, uint16_t token) {
        if (token < vocabulary) return true;
        found = shard.path + ": offset " + std::to_string(kHeaderBytes + size_t(i) * 2) + ": token " + std::to_string(token);
        return false;
      });
      if (!found.empty()) return found;
    }
    return "";
  }

 private:
  void close_all() {
    for (auto& shard : shards_) ::close(shard.fd);
    shards_.clear();
  }

  std::vector<ShardFile> shards_;
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
