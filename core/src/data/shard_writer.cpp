// Atomic shard files: header placeholder, tokens, then the real header, fsync and rename.
// Tokens are written in this machine's byte order; llm.c's format is little-endian, as are
// the x86-64 and AArch64 machines Keel runs on.
#include "data/shard_writer.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "data/shard_format.h"
#include "host/errors.h"

namespace keel {
namespace {

KeelError write_error(const std::string& path, const std::string& doing) {
  return KeelError(KEEL_ERR_IO, path + ": cannot " + doing + " (" + std::strerror(errno) + ")");
}

}  // namespace

ShardWriter::ShardWriter(std::string dir, std::string split, int64_t max_tokens_per_shard, ShardFormat format)
    : dir_(std::move(dir)), split_(std::move(split)), max_tokens_(max_tokens_per_shard), format_(format) {}

ShardWriter::~ShardWriter() {
  if (file_) {
    std::fclose(file_);
    std::remove(temp_path_.c_str());
  }
}

std::string ShardWriter::shard_path(const std::string& dir, const std::string& split, int64_t index) {
  char name[32];
  std::snprintf(name, sizeof(name), "_%06lld.bin", static_cast<long long>(index));
  return dir + "/" + split + name;
}

void ShardWriter::open_shard() {
  temp_path_ = dir_ + "/." + split_ + "_" + std::to_string(files_.size()) + ".bin.tmp-" + std::to_string(::getpid());
  file_ = std::fopen(temp_path_.c_str(), "wb");
  if (!file_) throw write_error(temp_path_, "create a shard");
  const int32_t placeholder[kShardHeaderInts] = {};
  if (std::fwrite(placeholder, 1, kShardHeaderBytes, file_) != kShardHeaderBytes) throw write_error(temp_path_, "write");
  shard_tokens_ = 0;
}

void ShardWriter::close_shard() {
  int32_t header[kShardHeaderInts] = {};
  header[0] = format_.magic;
  header[1] = format_.version;
  header[2] = int32_t(shard_tokens_);
  const std::string path = shard_path(dir_, split_, int64_t(files_.size()));
  if (std::fseek(file_, 0, SEEK_SET) != 0 || std::fwrite(header, 1, kShardHeaderBytes, file_) != kShardHeaderBytes ||
      std::fflush(file_) != 0 || ::fsync(::fileno(file_)) != 0)
    throw write_error(temp_path_, "write");
  const int closed = std::fclose(file_);
  file_ = nullptr;
  if (closed != 0 || std::rename(temp_path_.c_str(), path.c_str()) != 0) {
    std::remove(temp_path_.c_str());
    throw write_error(path, "finish the shard");
  }
  files_.push_back(path);
}

void ShardWriter::append(const uint32_t* tokens, int64_t count) {
  while (count > 0) {
    if (!file_) open_shard();
    const int64_t n = std::min(count, max_tokens_ - shard_tokens_);
    const void* data = tokens;
    if (format_.token_bytes == 2) {
      narrow_.resize(size_t(n));
      for (int64_t i = 0; i < n; ++i) {
        if (tokens[i] > UINT16_MAX)
          throw KeelError(KEEL_ERR_INTERNAL, temp_path_ + ": token " + std::to_string(tokens[i]) + " does not fit a uint16 shard");
        narrow_[size_t(i)] = uint16_t(tokens[i]);
      }
      data = narrow_.data();
    }
    if (std::fwrite(data, format_.token_bytes, size_t(n), file_) != size_t(n)) throw write_error(temp_path_, "write");
    shard_tokens_ += n;
    total_tokens_ += n;
    tokens += n;
    count -= n;
    if (shard_tokens_ == max_tokens_) close_shard();
  }
}

void ShardWriter::finish() {
  if (file_) close_shard();
}

}  // namespace keel
