// Sample windows for training (random offsets) and validation (consecutive windows, the same
// ones at every evaluation so validation losses are comparable).
#include "data/token_source.h"

#include "host/errors.h"
#include "host/param_init.h"

namespace keel {

BatchSampler::BatchSampler(std::shared_ptr<const TokenSource> source, uint64_t seed, bool sequential)
    : source_(std::move(source)), seed_(mix64(seed ^ 0x6461746173616D70ull)), sequential_(sequential) {}

Batch BatchSampler::next(int32_t batch, int32_t seq_len) {
  const int64_t window = int64_t(seq_len) + 1;
  const int64_t n = source_->num_tokens();
  if (n < window)
    throw KeelError(KEEL_ERR_INVALID_CONFIG, source_->describe() + " holds " + std::to_string(n) +
                                                 " tokens, fewer than one sequence of " + std::to_string(window));
  Batch out;
  out.batch = batch;
  out.seq_len = seq_len;
  out.tokens.resize(size_t(batch) * seq_len);
  out.targets.resize(size_t(batch) * seq_len);
  std::vector<int32_t> buffer(window);
  const int64_t windows = n - window + 1;
  for (int32_t b = 0; b < batch; ++b, ++sample_index_) {
    int64_t start = sequential_ ? (sample_index_ * seq_len) % windows
                                : int64_t(mix64(seed_ ^ mix64(uint64_t(sample_index_))) % uint64_t(windows));
    source_->read(start, window, buffer.data());
    std::copy(buffer.begin(), buffer.end() - 1, out.tokens.begin() + size_t(b) * seq_len);
    std::copy(buffer.begin() + 1, buffer.end(), out.targets.begin() + size_t(b) * seq_len);
  }
  return out;
}

}  // namespace keel
