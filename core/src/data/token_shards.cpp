// llm.c token shards: a header of 256 int32 (magic, version, token count) followed by the
// tokens, uint16 in GPT-2's format (20240520, version 1) or uint32 in Llama 3's (20240801,
// version 7); one glob may mix both. The shards matching a glob, sorted, form one source whose shard boundaries
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
  int64_t count = 0;       // tokens the header promises (checked against the size at open)
  size_t token_bytes = 2;  // 2: uint16 tokens, 4: uint32

  size_t offset_of(int64_t token) const { return kHeaderBytes + size_t(token) * token_bytes; }

  // Tokens [first, first+n) of this shard, widened to uint32. Throws KeelError naming the shard
  // when the file no longer holds them.
  void read_tokens(int64_t first, int64_t n, uint32_t* out) const {
    const size_t want = size_t(n) * token_bytes;
    const off_t offset = off_t(offset_of(first));
    std::vector<uint16_t> narrow(token_bytes == 2 ? size_t(n) : 0);  // uint16 tokens, widened below
    char* raw = token_bytes == 2 ? reinterpret_cast<char*>(narrow.data()) : reinterpret_cast<char*>(out);
    size_t got = 0;
    while (got < want) {
      const ssize_t r = ::pread(fd, raw + got, want - got, offset + off_t(got));
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
    std::copy(narrow.begin(), narrow.end(), out);
  }

  // Calls visit(index, token) for every token, in chunks.
  template <typename Visit>
  void scan(Visit&& visit) const {
    std::vector<uint32_t> chunk;
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
  ShardFormat format{};
  if (header[0] == kShardFormatU16.magic) format = kShardFormatU16;
  else if (header[0] == kShardFormatU32.magic) format = kShardFormatU32;
  else
    fail("offset 0: bad magic " + std::to_string(header[0]) + ", expected " + std::to_string(kShardFormatU16.magic) +
         " (an llm.c token shard of uint16 tokens) or " + std::to_string(kShardFormatU32.magic) + " (uint32 tokens)");
  if (header[1] != format.version)
    fail("offset 4: unsupported version " + std::to_string(header[1]) + ", expected " + std::to_string(format.version) +
         " for magic " + std::to_string(format.magic));
  const int64_t count = header[2];
  const size_t need = kHeaderBytes + size_t(std::max<int64_t>(count, 0)) * format.token_bytes;
  if (count < 0 || need > bytes)
    fail("truncated: the header promises " + std::to_string(count) + " tokens (" + std::to_string(need) +
         " bytes) but the file has " + std::to_string(bytes) + " bytes");
  return {path, fd, count, format.token_bytes};
}

class ShardSource : public TokenSource {
 public:
  explicit ShardSource(const std::vector<std::string>& paths, std::string what) : what_(std::move(what)) {
    try {
      for (const auto& path : paths) {
        shards_.push_back(open_shard(path));
        starts_.push_back(total_);
        total_ += shards_.back().count;
        shards_.back().scan([&](int64_t, uint32_t token) {
          max_token_ = std::max<int64_t>(max_token_, token);
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
  // A uint32 token past INT32_MAX reads as INT32_MAX, which no vocabulary reaches either.
  int32_t max_token() const override { return int32_t(std::min<int64_t>(max_token_, INT32_MAX)); }
  void read(int64_t start, int64_t count, int32_t* out) const override {
    size_t shard = size_t(std::upper_bound(starts_.begin(), starts_.end(), start) - starts_.begin()) - 1;
    int64_t offset = start - starts_[shard];
    std::vector<uint32_t> tokens;
    while (count > 0) {
      while (offset >= shards_[shard].count) offset -= shards_[shard++].count;
      const int64_t n = std::min(count, shards_[shard].count - offset);
      tokens.resize(size_t(n));
      shards_[shard].read_tokens(offset, n, tokens.data());
      for (uint32_t token : tokens) *out++ = int32_t(std::min<uint32_t>(token, INT32_MAX));
      count -= n, offset += n;
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
      shard.scan([&](int64_t i, uint32_t token) {
        if (int64_t(token) < vocabulary) return true;
        found = shard.path + ": offset " + std::to_string(shard.offset_of(i)) + ": token " + std::to_string(token);
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
  int64_t max_token_ = 0;
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
