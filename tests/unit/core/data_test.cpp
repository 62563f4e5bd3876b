// llm.c token shards: valid files read back exactly; bad ones are refused with the file and
// the offset. Batches are next-token pairs and a pure function of the seed.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "config/run_config.h"
#include "data/token_source.h"
#include "host/errors.h"

namespace {
namespace fs = std::filesystem;

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("keel-data-test-" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
};

void write_shard(const fs::path& file, const std::vector<uint16_t>& tokens, int32_t magic = 20240520,
                 int64_t claimed = -1, int32_t version = 1) {
  std::vector<int32_t> header(256, 0);
  header[0] = magic, header[1] = version, header[2] = int32_t(claimed < 0 ? tokens.size() : claimed);
  std::ofstream out(file, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), 1024);
  out.write(reinterpret_cast<const char*>(tokens.data()), std::streamsize(tokens.size() * 2));
}

keel::DataConfig shard_config(const fs::path& dir) {
  keel::DataConfig c;
  c.source = "shards";
  c.train_pattern = (dir / "train_*.bin").string();
  return c;
}

std::string open_error(const keel::DataConfig& c) {
  try {
    keel::open_data(c);
  } catch (const keel::KeelError& e) {
    return e.what();
  }
  return "";
}

TEST(TokenShards, ReadAcrossShardBoundaries) {
  TempDir dir;
  write_shard(dir.path / "train_000.bin", {1, 2, 3});
  write_shard(dir.path / "train_001.bin", {4, 5, 6, 7});
  auto splits = keel::open_data(shard_config(dir.path));
  ASSERT_EQ(splits.train->num_tokens(), 7);
  EXPECT_EQ(splits.train->max_token(), 7);
  std::vector<int32_t> got(5);
  splits.train->read(1, 5, got.data());
  EXPECT_EQ(got, (std::vector<int32_t>{2, 3, 4, 5, 6}));
}

TEST(TokenShards, BadShardsNameFileAndOffset) {
  TempDir dir;
  write_shard(dir.path / "train_000.bin", {1, 2, 3}, 12345);
  std::string e = open_error(shard_config(dir.path));
  EXPECT_NE(e.find("train_000.bin: offset 0: bad magic 12345, expected 20240520"), std::string::npos) << e;

  write_shard(dir.path / "train_000.bin", {1, 2, 3}, 20240520, 50);
  e = open_error(shard_config(dir.path));
  EXPECT_NE(e.find("train_000.bin: truncated: the header promises 50 tokens"), std::string::npos) << e;

  write_shard(dir.path / "train_000.bin", {1, 2, 3}, 20240520, -1, 3);
  e = open_error(shard_config(dir.path));
  EXPECT_NE(e.find("offset 4: unsupported version 3"), std::string::npos) << e;

  std::ofstream(dir.path / "train_000.bin") << "tiny";
  e = open_error(shard_config(dir.path));
  EXPECT_NE(e.find("smaller than the 1024-byte header"), std::string::npos) << e;

  keel::DataConfig none = shard_config(dir.path / "nowhere");
  EXPECT_NE(open_error(none).find("data.train: no token shard matches"), std::string::npos);
}

TEST(BatchSampler, TargetsAreNextTokensAndSeedsReproduce) {
  TempDir dir;
  std::vector<uint16_t> tokens(1000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = uint16_t(i);
  write_shard(dir.path / "train_000.bin", tokens);
  auto splits = keel::open_data(shard_config(dir.path));
  keel::BatchSampler a(splits.train, 5, false), b(splits.train, 5, false), c(splits.train, 6, false);
  keel::Batch x = a.next(3, 16), y = b.next(3, 16), z = c.next(3, 16);
  EXPECT_EQ(x.tokens, y.tokens);
  EXPECT_NE(x.tokens, z.tokens);
  for (int r = 0; r < 3; ++r)
    for (int t = 0; t < 16; ++t) {
      EXPECT_EQ(x.targets[r * 16 + t], x.tokens[r * 16 + t] + 1);  // tokens are consecutive integers
      if (t) EXPECT_EQ(x.tokens[r * 16 + t], x.tokens[r * 16 + t - 1] + 1);
    }
  keel::BatchSampler sequential(splits.train, 5, true);
  EXPECT_EQ(sequential.next(2, 4).tokens, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
}

}  // namespace
