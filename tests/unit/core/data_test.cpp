// llm.c token shards: valid files read back exactly; bad ones are refused with the file and
// the offset. The sampler: each epoch is a permutation of the windows, reshuffled per epoch;
// data-parallel ranks split the stream without overlap; state()/restore() resumes exactly and
// refuses another dataset or seed. prepare-data: bytes in equal tokens out, split by file.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "config/run_config.h"
#include "prepare_data_command.h"
#include "data/token_source.h"
#include "host/errors.h"

namespace {
namespace fs = std::filesystem;

struct TempDir {
  static inline int made = 0;
  fs::path path = fs::temp_directory_path() /
                  ("keel-data-test-" + std::to_string(::getpid()) + "-" + std::to_string(made++));
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

// Shard k holds tokens k*1000, k*1000+1, ...: a token names its shard and its offset.
constexpr int kSeqLen = 8;
const std::vector<int> kShardSizes = {101, 57, 230, 5, 64};  // windows: 12, 7, 28, 0 (too short), 7
constexpr int64_t kWindows = 12 + 7 + 28 + 0 + 7;

std::shared_ptr<const keel::TokenSource> numbered_shards(const fs::path& dir, int first_value = 0) {
  for (size_t k = 0; k < kShardSizes.size(); ++k) {
    std::vector<uint16_t> tokens(kShardSizes[k]);
    for (int i = 0; i < kShardSizes[k]; ++i) tokens[i] = uint16_t(first_value + k * 1000 + i);
    write_shard(dir / ("train_00" + std::to_string(k) + ".bin"), tokens);
  }
  return keel::open_data(shard_config(dir)).train;
}

keel::SamplerOptions options(uint64_t seed, int32_t dp_rank = 0, int32_t dp_size = 1) {
  return keel::SamplerOptions{kSeqLen, seed, true, dp_rank, dp_size};
}

// The first token of each row: (shard, window) as shard*1000 + window*T.
std::vector<int32_t> draw_samples(keel::BatchSampler& sampler, int count) {
  std::vector<int32_t> firsts;
  for (int i = 0; i < count; ++i) firsts.push_back(sampler.next(1).tokens[0]);
  return firsts;
}

TEST(TokenShards, ReadAcrossShardBoundaries) {
  TempDir dir;
  write_shard(dir.path / "train_000.bin", {1, 2, 3});
  write_shard(dir.path / "train_001.bin", {4, 5, 6, 7});
  auto splits = keel::open_data(shard_config(dir.path));
  ASSERT_EQ(splits.train->num_tokens(), 7);
  EXPECT_EQ(splits.train->max_token(), 7);
  EXPECT_EQ(splits.train->shard_token_counts(), (std::vector<int64_t>{3, 4}));
  std::vector<int32_t> got(5);
  splits.train->read(1, 5, got.data());
  EXPECT_EQ(got, (std::vector<int32_t>{2, 3, 4, 5, 6}));
}

// Llama 3's format: magic 20240801, version 7, uint32 tokens; one glob may mix it with GPT-2's.
void write_shard_u32(const fs::path& file, const std::vector<uint32_t>& tokens, int64_t claimed = -1) {
  std::vector<int32_t> header(256, 0);
  header[0] = 20240801, header[1] = 7, header[2] = int32_t(claimed < 0 ? tokens.size() : claimed);
  std::ofstream out(file, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), 1024);
  out.write(reinterpret_cast<const char*>(tokens.data()), std::streamsize(tokens.size() * 4));
}

TEST(TokenShards, ReadsUint32ShardsBesideUint16Ones) {
  TempDir dir;
  write_shard(dir.path / "train_000.bin", {1, 2, 3});
  write_shard_u32(dir.path / "train_001.bin", {70000, 5, 128255, 7});
  auto splits = keel::open_data(shard_config(dir.path));
  ASSERT_EQ(splits.train->num_tokens(), 7);
  EXPECT_EQ(splits.train->max_token(), 128255);
  EXPECT_EQ(splits.train->shard_token_counts(), (std::vector<int64_t>{3, 4}));
  std::vector<int32_t> got(5);
  splits.train->read(2, 5, got.data());
  EXPECT_EQ(got, (std::vector<int32_t>{3, 70000, 5, 128255, 7}));
  // The first token past the vocabulary, named by file, byte offset (4 bytes a token) and id.
  EXPECT_EQ(keel::shard_token_out_of_range(*splits.train, 100000),
            (dir.path / "train_001.bin").string() + ": offset 1032: token 128255");

  write_shard_u32(dir.path / "train_001.bin", {1, 2}, 3);
  std::string e = open_error(shard_config(dir.path));
  EXPECT_NE(e.find("train_001.bin: truncated: the header promises 3 tokens (1036 bytes)"), std::string::npos) << e;
  write_shard(dir.path / "train_001.bin", {1, 2}, 20240801, -1, 1);
  e = open_error(shard_config(dir.path));
  EXPECT_NE(e.find("offset 4: unsupported version 1, expected 7 for magic 20240801"), std::string::npos) << e;
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

// A shard cut short after the run opened it (a copy in progress, a full disk): reading past
// its new end is an error naming the shard, not a SIGBUS from a memory map.
TEST(TokenShards, ShardTruncatedDuringTheRunNamesTheShard) {
  TempDir dir;
  std::vector<uint16_t> tokens(20000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = uint16_t(i % 256);
  write_shard(dir.path / "train_000.bin", tokens);
  auto splits = keel::open_data(shard_config(dir.path));
  fs::resize_file(dir.path / "train_000.bin", 2048);  // the header and 512 tokens remain
  std::vector<int32_t> got(4);
  splits.train->read(100, 4, got.data());
  EXPECT_EQ(got, (std::vector<int32_t>{100, 101, 102, 103}));
  try {
    splits.train->read(15000, 4, got.data());
    FAIL() << "reading past the truncated end succeeded";
  } catch (const keel::KeelError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("train_000.bin: the token shard was truncated while the run was reading it"), std::string::npos)
        << message;
    EXPECT_NE(message.find("the header promised 20000 tokens"), std::string::npos) << message;
  }
}

TEST(BatchSampler, TargetsAreNextTokensAndSeedsReproduce) {
  TempDir dir;
  std::vector<uint16_t> tokens(1000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = uint16_t(i);
  write_shard(dir.path / "train_000.bin", tokens);
  auto splits = keel::open_data(shard_config(dir.path));
  keel::BatchSampler a(splits.train, {16, 5, true}), b(splits.train, {16, 5, true}), c(splits.train, {16, 6, true});
  keel::Batch x = a.next(3), y = b.next(3), z = c.next(3);
  EXPECT_EQ(x.tokens, y.tokens);
  EXPECT_NE(x.tokens, z.tokens);
  for (int r = 0; r < 3; ++r)
    for (int t = 0; t < 16; ++t) {
      EXPECT_EQ(x.targets[r * 16 + t], x.tokens[r * 16 + t] + 1);  // tokens are consecutive integers
      if (t) EXPECT_EQ(x.tokens[r * 16 + t], x.tokens[r * 16 + t - 1] + 1);
    }
  keel::BatchSampler sequential(splits.train, {4, 5, false});
  EXPECT_EQ(sequential.next(2).tokens, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(sequential.samples_per_epoch(), 999 / 4);
}

TEST(BatchSampler, WindowsNeverCrossShardBoundaries) {
  TempDir dir;
  auto source = numbered_shards(dir.path);
  keel::BatchSampler sampler(source, options(3));
  EXPECT_EQ(sampler.samples_per_epoch(), kWindows);
  for (int step = 0; step < 3 * kWindows / 4; ++step) {  // three epochs in batches of 4
    keel::Batch batch = sampler.next(4);
    for (int r = 0; r < 4; ++r) {
      const int32_t first = batch.tokens[r * kSeqLen], shard = first / 1000, offset = first % 1000;
      EXPECT_EQ(offset % kSeqLen, 0) << "a window starts off the grid of seq_len";
      EXPECT_LT(offset + kSeqLen, kShardSizes[shard]) << "window at " << first << " runs past its shard";
      EXPECT_EQ(batch.targets[r * kSeqLen + kSeqLen - 1], first + kSeqLen);
    }
  }
}

TEST(BatchSampler, EachEpochIsAPermutationReshuffled) {
  TempDir dir;
  auto source = numbered_shards(dir.path);
  keel::BatchSampler sampler(source, options(11)), same(source, options(11)), other(source, options(12));
  const std::vector<int32_t> epoch1 = draw_samples(sampler, kWindows), epoch2 = draw_samples(sampler, kWindows);
  std::set<int32_t> all_windows;
  for (size_t k = 0; k < kShardSizes.size(); ++k)
    for (int w = 0; (w + 1) * kSeqLen < kShardSizes[k]; ++w) all_windows.insert(int32_t(k * 1000 + w * kSeqLen));
  ASSERT_EQ(all_windows.size(), size_t(kWindows));
  for (const auto& epoch : {epoch1, epoch2}) {
    EXPECT_EQ(std::set<int32_t>(epoch.begin(), epoch.end()), all_windows);
    EXPECT_EQ(epoch.size(), all_windows.size()) << "a window was visited twice";
  }
  EXPECT_NE(epoch1, epoch2) << "epoch 2 repeats the order of epoch 1";
  EXPECT_EQ(draw_samples(same, kWindows), epoch1) << "the same seed gave another order";
  EXPECT_NE(draw_samples(other, kWindows), epoch1) << "another seed gave the same order";
  // Shards are visited one after another: the epoch is 4 runs of one shard each.
  int runs = 1;
  for (int i = 1; i < kWindows; ++i) runs += epoch1[i] / 1000 != epoch1[i - 1] / 1000;
  EXPECT_EQ(runs, 4);
  std::vector<int32_t> file_order = epoch1;
  std::sort(file_order.begin(), file_order.end());
  EXPECT_NE(epoch1, file_order);
}

TEST(BatchSampler, DataParallelRanksAreDisjointAndCoverTheEpoch) {
  TempDir dir;
  auto source = numbered_shards(dir.path);
  constexpr int kRanks = 4, kPerRank = (kWindows + kRanks - 1) / kRanks;  // 14 each: the epoch and 2 samples more
  keel::BatchSampler single(source, options(5));
  const std::vector<int32_t> stream = draw_samples(single, kPerRank * kRanks);
  std::multiset<int32_t> first_epoch;
  for (int r = 0; r < kRanks; ++r) {
    keel::BatchSampler rank(source, options(5, r, kRanks));
    const std::vector<int32_t> mine = draw_samples(rank, kPerRank);
    for (int k = 0; k < kPerRank; ++k) {
      EXPECT_EQ(mine[k], stream[size_t(k) * kRanks + r]) << "rank " << r << " sample " << k;
      if (k * kRanks + r < kWindows) first_epoch.insert(mine[k]);
    }
  }
  EXPECT_EQ(first_epoch.size(), size_t(kWindows));
  EXPECT_EQ(std::set<int32_t>(first_epoch.begin(), first_epoch.end()).size(), size_t(kWindows))
      << "two ranks read the same sample in one epoch";
}

// Draws `cut` batches, saves, restores into a fresh sampler (through JSON text) and compares
// the next 50 batches with an uninterrupted sampler's.
void expect_resumes_exactly(const std::shared_ptr<const keel::TokenSource>& source, int cut) {
  constexpr int kBatch = 4, kCompared = 50;
  keel::BatchSampler uninterrupted(source, options(9)), before(source, options(9)), after(source, options(9));
  std::vector<keel::Batch> expected;
  for (int i = 0; i < cut + kCompared; ++i) expected.push_back(uninterrupted.next(kBatch));
  for (int i = 0; i < cut; ++i) before.next(kBatch);
  const nlohmann::json saved = nlohmann::json::parse(before.state().dump());
  EXPECT_EQ(saved["epoch"], cut * kBatch / kWindows);
  EXPECT_EQ(saved["position"], cut * kBatch % kWindows);
  after.restore(saved);
  for (int i = 0; i < kCompared; ++i) {
    const keel::Batch got = after.next(kBatch);
    ASSERT_EQ(got.tokens, expected[cut + i].tokens) << "cut at batch " << cut << ", batch " << i << " after restore";
    ASSERT_EQ(got.targets, expected[cut + i].targets);
  }
}

TEST(BatchSampler, RestoreContinuesExactly) {
  TempDir dir;
  auto source = numbered_shards(dir.path);
  expect_resumes_exactly(source, 5);   // mid-epoch: 20 of 54 samples
  expect_resumes_exactly(source, 13);  // 52 samples: the next batch crosses into epoch 2
  expect_resumes_exactly(source, 27);  // exactly two epochs done
  expect_resumes_exactly(source, 40);  // mid-epoch 3
}

TEST(BatchSampler, RestoreIntoAnotherDataParallelSize) {
  TempDir dir;
  auto source = numbered_shards(dir.path);
  keel::BatchSampler rank0(source, options(4, 0, 2)), rank1(source, options(4, 1, 2));
  for (int i = 0; i < 10; ++i) rank0.next(3), rank1.next(3);  // 60 samples: 1 epoch and 6
  EXPECT_EQ(rank0.state(), rank1.state());
  keel::BatchSampler single(source, options(4)), restored(source, options(4));
  for (int i = 0; i < 20; ++i) single.next(3);
  restored.restore(rank0.state());
  EXPECT_EQ(restored.next(5).tokens, single.next(5).tokens);
}

std::string restore_error(keel::BatchSampler& sampler, const nlohmann::json& state) {
  try {
    sampler.restore(state);
  } catch (const keel::KeelError& e) {
    return e.what();
  }
  return "";
}

TEST(BatchSampler, RestoreRefusesAnotherDatasetSeedOrLength) {
  TempDir dir, other_dir;
  auto source = numbered_shards(dir.path), same_sizes = numbered_shards(other_dir.path, 7);
  keel::BatchSampler saved(source, options(9));
  saved.next(10);
  const nlohmann::json state = saved.state();

  keel::BatchSampler other_data(same_sizes, options(9));
  std::string e = restore_error(other_data, state);
  EXPECT_NE(e.find("resume with the same data files"), std::string::npos) << e;

  keel::BatchSampler other_seed(source, options(10));
  e = restore_error(other_seed, state);
  EXPECT_NE(e.find("saved with seed 9, but this run has seed 10"), std::string::npos) << e;

  keel::BatchSampler other_length(source, {kSeqLen * 2, 9, true});
  e = restore_error(other_length, state);
  EXPECT_NE(e.find("saved with seq_len 8, but this run has seq_len 16"), std::string::npos) << e;

  keel::BatchSampler three_ranks(source, options(9, 0, 3));
  e = restore_error(three_ranks, state);
  EXPECT_NE(e.find("10 samples consumed do not divide among 3 data-parallel ranks"), std::string::npos) << e;

  nlohmann::json partial = state;
  partial.erase("fingerprint");
  keel::BatchSampler fresh(source, options(9));
  e = restore_error(fresh, partial);
  EXPECT_NE(e.find("missing \"fingerprint\""), std::string::npos) << e;
  EXPECT_EQ(fresh.next(1).tokens, keel::BatchSampler(source, options(9)).next(1).tokens)
      << "a refused restore moved the sampler";
}

TEST(BatchSampler, TooShortSourcesAreRefused) {
  TempDir dir;
  write_shard(dir.path / "train_000.bin", {1, 2, 3, 4});
  auto source = keel::open_data(shard_config(dir.path)).train;
  try {
    keel::BatchSampler sampler(source, {8, 1, true});
    FAIL() << "a source with no full window was accepted";
  } catch (const keel::KeelError& e) {
    EXPECT_NE(std::string(e.what()).find("holds 4 tokens in 1 shard(s), and none holds one sequence of 9 tokens"),
              std::string::npos)
        << e.what();
  }
}

TEST(TextSource, EpochsCoverTheEmbeddedText) {
  TempDir dir;
  std::string text;  // random letters: no two windows of it are equal
  uint64_t x = 1;
  for (int i = 0; i < 12000; ++i) text += char('a' + ((x = x * 6364136223846793005ull + 1442695040888963407ull) >> 59));
  std::ofstream(dir.path / "a.txt") << text;
  keel::DataConfig config;
  config.text_root = dir.path.string();
  auto splits = keel::open_data(config);
  keel::BatchSampler sampler(splits.train, options(2));
  EXPECT_EQ(sampler.samples_per_epoch(), (splits.train->num_tokens() - 1) / kSeqLen);
  std::set<std::string> seen;
  for (int64_t i = 0; i < sampler.samples_per_epoch(); ++i) {
    const keel::Batch b = sampler.next(1);
    seen.insert(std::string(b.tokens.begin(), b.tokens.end()) + char(b.targets.back()));
  }
  EXPECT_EQ(int64_t(seen.size()), sampler.samples_per_epoch()) << "a window of the text came twice in one epoch";
}

int prepare(const std::vector<std::string>& args, std::string* out_text = nullptr, std::string* err_text = nullptr) {
  std::ostringstream out, err;
  const int code = keel::prepare_data_command(args, out, err);
  if (out_text) *out_text = out.str();
  if (err_text) *err_text = err.str();
  return code;
}

std::vector<uint16_t> read_tokens(const fs::path& shard) {
  std::ifstream in(shard, std::ios::binary);
  std::vector<int32_t> header(256);
  in.read(reinterpret_cast<char*>(header.data()), 1024);
  EXPECT_EQ(header[0], 20240520);
  EXPECT_EQ(header[1], 1);
  std::vector<uint16_t> tokens(static_cast<size_t>(header[2]));
  in.read(reinterpret_cast<char*>(tokens.data()), std::streamsize(tokens.size() * 2));
  EXPECT_EQ(in.gcount(), std::streamsize(tokens.size() * 2));
  EXPECT_EQ(in.peek(), EOF) << shard << " is longer than its header says";
  return tokens;
}

TEST(PrepareData, BytesBecomeTokensSplitByDocument) {
  TempDir dir;
  const fs::path in = dir.path / "in", out = dir.path / "out";
  fs::create_directories(in / "sub");
  fs::create_directories(in / ".git");
  std::map<std::string, std::string> docs;
  for (int i = 0; i < 20; ++i) {
    const std::string name = (i % 2 ? "sub/doc" : "doc") + std::to_string(i) + ".txt";
    docs[name] = std::string(size_t(300 + 37 * i), char('a' + i));
    std::ofstream(in / name) << docs[name];
  }
  std::ofstream(in / ".git" / "config") << "hidden";
  std::ofstream(in / "blob.bin", std::ios::binary) << std::string("ab\0cd", 5);
  std::string log;
  ASSERT_EQ(prepare({in.string(), "--out", out.string(), "--val-fraction", "0.2", "--shard-tokens", "1500"}, &log), 0);
  EXPECT_NE(log.find("20 documents"), std::string::npos) << log;
  EXPECT_NE(log.find("skipped binary (contains a NUL byte): " + (in / "blob.bin").string()), std::string::npos) << log;

  std::map<char, int64_t> train_bytes, val_bytes;  // every document is one repeated letter
  int64_t total = 0;
  for (const auto& entry : fs::directory_iterator(out)) {
    const std::string name = entry.path().filename().string();
    ASSERT_TRUE(name.rfind("train_", 0) == 0 || name.rfind("val_", 0) == 0) << "unexpected file " << name;
    for (uint16_t t : read_tokens(entry.path())) (name[0] == 't' ? train_bytes : val_bytes)[char(t)]++, ++total;
  }
  int64_t expected_total = 0, expected_val = 0;
  for (const auto& [name, text] : docs) {
    expected_total += int64_t(text.size());
    const char letter = text[0];
    const bool in_train = train_bytes.count(letter), in_val = val_bytes.count(letter);
    EXPECT_NE(in_train, in_val) << name << " is in both splits or neither";
    EXPECT_EQ(train_bytes[letter] + val_bytes[letter], int64_t(text.size())) << name;
    if (in_val) expected_val += int64_t(text.size());
  }
  EXPECT_EQ(total, expected_total);
  EXPECT_GT(expected_val, expected_total / 10) << "validation holds too little of the bytes";
  EXPECT_LT(expected_val, expected_total * 3 / 10) << "validation holds too much of the bytes";
  EXPECT_TRUE(fs::exists(out / "train_000000.bin") && fs::exists(out / "train_000001.bin"));
  EXPECT_EQ(fs::file_size(out / "train_000000.bin"), 1024u + 2 * 1500);

  // The same inputs give the same files.
  const auto first_bytes = [&] { std::stringstream s; s << std::ifstream(out / "train_000000.bin").rdbuf(); return s.str(); };
  const std::string before = first_bytes();
  ASSERT_EQ(prepare({in.string(), "--out", out.string(), "--val-fraction", "0.2", "--shard-tokens", "1500"}), 0);
  EXPECT_EQ(first_bytes(), before);
}

TEST(PrepareData, TwoDocumentsGiveOneToEachSplit) {
  TempDir dir;
  std::ofstream(dir.path / "a.txt") << std::string(5000, 'a');
  std::ofstream(dir.path / "b.txt") << std::string(7000, 'b');
  ASSERT_EQ(prepare({(dir.path / "a.txt").string(), (dir.path / "b.txt").string(), "--out", (dir.path / "o").string()}), 0);
  const auto train = read_tokens(dir.path / "o" / "train_000000.bin"), val = read_tokens(dir.path / "o" / "val_000000.bin");
  EXPECT_EQ(train.size() + val.size(), 12000u);
  EXPECT_TRUE(train.size() == 5000 || train.size() == 7000);
}

TEST(PrepareData, BadInputsFailWithTheirPath) {
  TempDir dir;
  std::string err;
  EXPECT_EQ(prepare({"/nonexistent/keel-input", "--out", (dir.path / "o").string()}, nullptr, &err), 1);
  EXPECT_NE(err.find("/nonexistent/keel-input: no such file or folder"), std::string::npos) << err;
  EXPECT_EQ(prepare({"--out", (dir.path / "o").string()}, nullptr, &err), 2);
  EXPECT_NE(err.find("no INPUT given"), std::string::npos) << err;
  EXPECT_EQ(prepare({dir.path.string()}, nullptr, &err), 2);
  EXPECT_NE(err.find("--out DIR is required"), std::string::npos) << err;
  EXPECT_EQ(prepare({dir.path.string(), "--out", "o", "--val-fraction", "1.5"}, nullptr, &err), 2);
  EXPECT_NE(err.find("--val-fraction: expected a number in [0, 1), found '1.5'"), std::string::npos) << err;
  std::ofstream(dir.path / "a.txt") << "some text";
  std::ofstream(dir.path / "file") << "x";
  EXPECT_EQ(prepare({(dir.path / "a.txt").string(), "--out", (dir.path / "file" / "o").string()}, nullptr, &err), 1);
  EXPECT_NE(err.find((dir.path / "file" / "o").string() + ": cannot create the output folder"), std::string::npos) << err;
}

}  // namespace
