// A source of training or validation sequences: each sample is seq_len+1 consecutive tokens,
// giving inputs and next-token targets. Sources are deterministic given (seed, sample index),
// so a run is reproducible and its data position is one integer.
#pragma once

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
  // Copies tokens [start, start+count) into out.
  virtual void read(int64_t start, int64_t count, int32_t* out) const = 0;
  virtual std::string describe() const = 0;
};

// Fills a (B,T) batch: row b holds the T tokens of sample windows chosen by `pick_start`.
struct Batch {
  int32_t batch = 0, seq_len = 0;
  std::vector<int32_t> tokens;   // (B,T)
  std::vector<int32_t> targets;  // (B,T)
};

// Training batches: windows at pseudo-random offsets, a pure function of (seed, sample index).
class BatchSampler {
 public:
  BatchSampler(std::shared_ptr<const TokenSource> source, uint64_t seed, bool sequential);
  Batch next(int32_t batch, int32_t seq_len);
  int64_t samples_drawn() const { return sample_index_; }
  void seek(int64_t samples_drawn) { sample_index_ = samples_drawn; }

 private:
  std::shared_ptr<const TokenSource> source_;
  uint64_t seed_;
  bool sequential_;
  int64_t sample_index_ = 0;
};

struct DataSplits {
  std::shared_ptr<const TokenSource> train, val;
};

// Builds the configured train/validation sources; throws KeelError naming the file or folder.
DataSplits open_data(const DataConfig& config);

}  // namespace keel
