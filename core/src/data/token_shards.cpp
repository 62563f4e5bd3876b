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
  bool masked = false;     // Keel's masked shard: one mask byte per token after the tokens
  bool packed = false;     // ... whose mask bytes mark where each conversation starts
  int64_t laid_out_for = 0;  // its samples' length (header[5]); 0: none
  std::string identity;    // its tokenizer's SHA-256 in hex; "" when none is recorded

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

  // Mask bytes [first, first+n) of a masked shard.
  void read_mask(int64_t first, int64_t n, uint8_t* out) const {
    const off_t offset = off_t(offset_of(count) + size_t(first));
    size_t got = 0;
    while (got < size_t(n)) {
      const ssize_t r = ::pread(fd, out + got, size_t(n) - got, offset + off_t(got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0)
        throw KeelError(KEEL_ERR_IO, path + ": reading the loss mask at offset " + std::to_string(offset) + " failed" +
                                         (r < 0 ? std::string(": ") + std::strerror(errno) : ": the file was truncated"));
      got += size_t(r);
    }
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
  bool masked = false, packed = false;
  std::string identity;
  int64_t laid_out_for = 0;
  if (header[0] == kShardFormatU16.magic) {
    format = kShardFormatU16;
  } else if (header[0] == kShardFormatU32.magic) {
    format = kShardFormatU32;
  } else if (header[0] == kMaskedShardMagic) {
    if (header[3] != 2 && header[3] != 4) fail("offset 12: token width " + std::to_string(header[3]) + ", expected 2 or 4");
    if (header[4] != kMaskedShardHasMask && header[4] != (kMaskedShardHasMask | kMaskedShardPacked))
      fail("offset 16: flags " + std::to_string(header[4]) + ", expected " + std::to_string(kMaskedShardHasMask) +
           " (a loss mask follows the tokens) or " + std::to_string(kMaskedShardHasMask | kMaskedShardPacked) +
           " (packed conversations)");
    packed = (header[4] & kMaskedShardPacked) != 0;
    format = {kMaskedShardMagic, kMaskedShardVersion, size_t(header[3])};
    masked = true;
    if (header[5] < 0) fail("offset 20: sample length " + std::to_string(header[5]) + " is negative");
    laid_out_for = header[5];
    const auto* digest = reinterpret_cast<const unsigned char*>(header + kShardIdentityInt);
    static const char* hex = "0123456789abcdef";
    for (size_t i = 0; i < kShardIdentityBytes; ++i) identity += {hex[digest[i] >> 4], hex[digest[i] & 15]};
    if (identity.find_first_not_of('0') == std::string::npos) identity.clear();
  } else {
    fail("offset 0: bad magic " + std::to_string(header[0]) + ", expected " + std::to_string(kShardFormatU16.magic) +
         " (an llm.c token shard of uint16 tokens), " + std::to_string(kShardFormatU32.magic) + " (uint32 tokens) or " +
         std::to_string(kMaskedShardMagic) + " (Keel's, with a loss mask)");
  }
  if (header[1] != format.version)
    fail("offset 4: unsupported version " + std::to_string(header[1]) + ", expected " + std::to_string(format.version) +
         " for magic " + std::to_string(format.magic));
  const int64_t count = header[2];
  const size_t need = kHeaderBytes + size_t(std::max<int64_t>(count, 0)) * (format.token_bytes + (masked ? 1 : 0));
  if (count < 0 || need > bytes)
    fail("truncated: the header promises " + std::to_string(count) + " tokens (" + std::to_string(need) +
         (masked ? " bytes with the loss mask" : " bytes") + ") but the file has " + std::to_string(bytes) + " bytes");
  return {path, fd, count, format.token_bytes, masked, packed, laid_out_for, identity};
}

class ShardSource : public TokenSource {
 public:
  explicit ShardSource(const std::vector<std::string>& paths, std::string what) : what_(std::move(what)) {
    try {
      for (const auto& path : paths) {
        shards_.push_back(open_shard(path));
        // A source learns from its mask or from every token, and from one tokenizer's ids.
        const ShardFile& first = shards_.front();
        if (shards_.back().masked != first.masked || shards_.back().identity != first.identity ||
            shards_.back().laid_out_for != first.laid_out_for || shards_.back().packed != first.packed)
          throw KeelError(KEEL_ERR_INVALID_ARGUMENT,
                          path + ": " + (shards_.back().masked != first.masked
                                             ? std::string(shards_.back().masked ? "has" : "has no") +
                                                   " loss mask, unlike " + first.path + "; one source is all "
                                                   "chat shards or none"
                                         : shards_.back().identity != first.identity
                                             ? "its tokenizer (sha256 " + shards_.back().identity + ") is not " +
                                                   first.path + "'s (" + first.identity + ")"
                                         : shards_.back().packed != first.packed
                                             ? std::string(shards_.back().packed ? "is" : "is not") +
                                                   " packed, unlike " + first.path + "; one source is all packed "
                                                   "or none"
                                             : "its samples are " + std::to_string(shards_.back().laid_out_for) +
                                                   " tokens long, " + first.path + "'s " +
                                                   std::to_string(first.laid_out_for)));
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
  bool has_loss_mask() const override { return !shards_.empty() && shards_.front().masked; }
  int64_t laid_out_for() const override { return shards_.empty() ? 0 : shards_.front().laid_out_for; }
  bool packed() const override { return !shards_.empty() && shards_.front().packed; }
  void read_mask(int64_t start, int64_t count, uint8_t* out) const override {
    size_t shard = size_t(std::upper_bound(starts_.begin(), starts_.end(), start) - starts_.begin()) - 1;
    int64_t offset = start - starts_[shard];
    while (count > 0) {
      while (offset >= shards_[shard].count) offset -= shards_[shard++].count;
      const int64_t n = std::min(count, shards_[shard].count - offset);
      shards_[shard].read_mask(offset, n, out);
      out += n, count -= n, offset += n;
    }
  }
  std::string tokenizer_identity() const { return shards_.empty() ? "" : shards_.front().identity; }
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
  auto val_source = std::make_shared<ShardSource>(glob_files(val, "data.val"), "shards " + val);
  const auto& train = static_cast<const ShardSource&>(*splits.train);
  if (train.tokenizer_identity() != val_source->tokenizer_identity() || train.has_loss_mask() != val_source->has_loss_mask())
    throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "data.val (" + val + ") and data.train (" + config.train_pattern +
                                                   ") differ: " + (train.has_loss_mask() != val_source->has_loss_mask()
                                                                       ? "one has a loss mask and the other none"
                                                                       : "they were made with different tokenizers"));
  splits.val = val_source;
  return splits;
}

std::string shard_token_out_of_range(const TokenSource& source, int32_t vocabulary) {
  auto shards = dynamic_cast<const ShardSource*>(&source);
  return shards ? shards->find_token_at_least(vocabulary) : "";
}

}  // namespace keel
