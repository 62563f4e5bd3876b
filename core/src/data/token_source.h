// A source of training or validation tokens, made of one or more shards, and the sampler that
// cuts it into fixed windows of seq_len+1 tokens (inputs and next-token targets). The sampler's
// order is a pure function of (seed, epoch, position), so a run is reproducible, data-parallel
// ranks read disjoint samples, and the data position of a checkpoint is a few integers.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace keel {

struct DataConfig;

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  virtual int64_t num_tokens() const = 0;
  virtual int32_t max_token() const = 0;  // the largest token id present, checked against the vocabulary
  // Copies tokens [start, start+count) of the whole sequence (all shards, in order) into out.
  virtual void read(int64_t start, int64_t count, int32_t* out) const = 0;
  virtual std::string describe() const = 0;
  // Tokens in each shard, in order; they sum to num_tokens(). Sample windows never cross a
  // shard boundary. A source that is one piece of text is one shard.
  virtual std::vector<int64_t> shard_token_counts() const { return {num_tokens()}; }
  // Whether some tokens are not learned as targets (Keel's masked shards); then read_mask gives,
  // for tokens [start, start+count), shard_format.h's mask bytes: kMaskLearned where the token is
  // learned, and, when packed(), kMaskDocumentStart on each document's first token.
  virtual bool has_loss_mask() const { return false; }
  virtual bool packed() const { return false; }
  virtual void read_mask(int64_t, int64_t count, uint8_t* out) const { std::fill(out, out + count, uint8_t(1)); }
  // The sample length the source was laid out for (one conversation every seq_len tokens), which
  // the sampler's windows must match; 0: any.
  virtual int64_t laid_out_for() const { return 0; }
};

struct Batch {
  int32_t batch = 0, seq_len = 0;
  std::vector<int32_t> tokens;   // (B,T)
  std::vector<int32_t> targets;  // (B,T)
  std::vector<int32_t> positions;  // (B,T) each token's place in its document, from a packed source; else empty
};

struct SamplerOptions {
  int32_t seq_len = 0;    // T: each sample is T+1 tokens, windows start every T tokens of a shard
  uint64_t seed = 0;
  bool shuffle = true;    // false: shards and windows in file order (validation)
  int32_t dp_rank = 0;    // this rank takes samples dp_rank, dp_rank + dp_size, ... of the global order
  int32_t dp_size = 1;
};

// Hands out batches of samples, epoch after epoch. Epoch e visits every window of every shard
// once: the shards in an order shuffled by (seed, e), and inside each shard the windows in an
// order shuffled by (seed, e, shard). Samples form one global stream across epochs, of which
// rank r takes every dp_size-th from offset r, so ranks stay in step, never overlap and
// together cover each epoch.
class BatchSampler {
 public:
  BatchSampler(std::shared_ptr<const TokenSource> source, const SamplerOptions& options);
  Batch next(int32_t batch);

  int64_t samples_per_epoch() const { return samples_per_epoch_; }
  // Where the global stream stands after the samples this rank has taken (the same on every
  // rank), plus what restore() checks: {"epoch", "position", "seed", "shuffle", "seq_len",
  // "samples_per_epoch", "fingerprint"}.
  nlohmann::json state() const;
  // Continues from a state(), possibly saved with another dp_size; throws KeelError naming the
  // field when the dataset, seq_len, seed or shuffle differ, or the position does not divide
  // among this sampler's ranks.
  void restore(const nlohmann::json& state);
  // Replicas that step on their own (strategy.h 0.14) each take their own count of samples:
  // state() as if every rank had taken `taken`, and this rank's own count, read and set.
  nlohmann::json state_at(int64_t taken) const;
  int64_t samples_taken() const { return taken_; }
  int64_t most_samples_taken() const;  // what one rank may take in a run
  void set_samples_taken(int64_t taken);

 private:
  struct Sample {
    int64_t epoch = 0;
    int64_t shard = 0;
    int64_t window = 0;  // index of the window inside its shard
  };
  Sample sample_at(int64_t global_index);
  const std::vector<uint32_t>& window_order(int64_t epoch, int64_t shard);
  std::string fingerprint() const;

  std::shared_ptr<const TokenSource> source_;
  SamplerOptions options_;
  std::vector<int64_t> shard_first_token_;  // where each shard starts in source_->read()
  std::vector<int64_t> shard_windows_;      // windows of T+1 tokens that fit in each shard
  int64_t samples_per_epoch_ = 0;
  int64_t taken_ = 0;  // samples this rank has taken; its next is global index taken_*dp_size + dp_rank

  // The epoch's shard order and its running window counts, rebuilt when the epoch changes.
  int64_t order_epoch_ = -1;
  std::vector<int64_t> shard_order_;
  std::vector<int64_t> windows_before_;  // windows of the shards earlier in shard_order_
  // The window order of the last (epoch, shard) used: O(windows of one shard) memory.
  int64_t cached_epoch_ = -1, cached_shard_ = -1;
  std::vector<uint32_t> cached_windows_;
};

struct DataSplits {
  std::shared_ptr<const TokenSource> train, val;
};

// Builds the configured train/validation sources; throws KeelError naming the file or folder.
DataSplits open_data(const DataConfig& config);

// For shards (token_shards.cpp): "<shard>: offset <byte>: token <id>" of the first token id at
// or past `vocabulary`, or "" if none (or if `source` is not shards).
std::string shard_token_out_of_range(const TokenSource& source, int32_t vocabulary);

}  // namespace keel
