// Epochs of fixed windows: the order of epoch e is computed from (seed, e) alone, so a sampler
// restored from {epoch, position} hands out exactly the batches an uninterrupted one would.
// Shards are visited one after another (as llm.c does) so reads stay local to one file.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <numeric>

#include "data/shard_format.h"
#include "data/token_source.h"
#include "host/errors.h"
#include "host/param_init.h"

namespace keel {
namespace {

constexpr int64_t kFingerprintTokens = 16;  // read at each end of each shard

// Fisher–Yates with a counter-based generator: the same (stream, n) always gives the same order.
template <typename T>
void shuffle_in_place(std::vector<T>& items, uint64_t stream) {
  for (size_t i = items.size(); i > 1; --i) {
    const size_t j = size_t(mix64(stream ^ mix64(uint64_t(i))) % uint64_t(i));
    std::swap(items[i - 1], items[j]);
  }
}

uint64_t epoch_stream(uint64_t seed, int64_t epoch) {
  return mix64(mix64(seed ^ 0x6461746173616D70ull) ^ mix64(uint64_t(epoch)));
}

KeelError bad_state(const std::string& why) {
  return KeelError(KEEL_ERR_INVALID_CONFIG, "data position in the checkpoint: " + why);
}

// Samples one stream may count: far beyond any run, and with room left so that the index of
// every later sample (taken * dp_size + dp_rank) stays inside int64.
constexpr int64_t kMaxSamples = int64_t(1) << 60;

// state[key] as an integer in [min, max], never converted before it is known to fit (a float
// or an integer past int64 would otherwise wrap silently).
int64_t state_integer(const nlohmann::json& state, const char* key, int64_t min, int64_t max) {
  const nlohmann::json& value = state.at(key);
  const std::string range = "expected an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
  if (value.is_number_unsigned() && value.get<uint64_t>() <= uint64_t(max) && int64_t(value.get<uint64_t>()) >= min)
    return int64_t(value.get<uint64_t>());
  if (value.is_number_integer() && !value.is_number_unsigned() && value.get<int64_t>() >= min && value.get<int64_t>() <= max)
    return value.get<int64_t>();
  throw bad_state(std::string(key) + ": " + range + ", found " + value.dump());
}

}  // namespace

BatchSampler::BatchSampler(std::shared_ptr<const TokenSource> source, const SamplerOptions& options)
    : source_(std::move(source)), options_(options) {
  if (options_.seq_len < 1)
    throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "BatchSampler: seq_len must be at least 1");
  if (options_.dp_size < 1 || options_.dp_rank < 0 || options_.dp_rank >= options_.dp_size)
    throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "BatchSampler: dp_rank " + std::to_string(options_.dp_rank) +
                                                   " is not in [0, dp_size " + std::to_string(options_.dp_size) + ")");
  const int64_t T = options_.seq_len;
  if (const int64_t laid_out = source_->laid_out_for(); laid_out > 0 && laid_out != T)
    throw KeelError(KEEL_ERR_INVALID_CONFIG, source_->describe() + ": its conversations were laid out one every " +
                                                 std::to_string(laid_out) + " tokens (keel.chat's seq_len), but "
                                                 "data.seq_len is " + std::to_string(T) + ": set data.seq_len to " +
                                                 std::to_string(laid_out) + ", or prepare the data again");
  int64_t first = 0;
  for (int64_t count : source_->shard_token_counts()) {
    const int64_t windows = count > T ? (count - 1) / T : 0;
    if (windows > int64_t(UINT32_MAX))
      throw KeelError(KEEL_ERR_INVALID_CONFIG, source_->describe() + ": a shard of " + std::to_string(count) +
                                                   " tokens holds more than 2^32 windows of seq_len " + std::to_string(T));
    shard_first_token_.push_back(first);
    shard_windows_.push_back(windows);
    first += count;
    samples_per_epoch_ += windows;
  }
  if (samples_per_epoch_ == 0)
    throw KeelError(KEEL_ERR_INVALID_CONFIG, source_->describe() + " holds " + std::to_string(source_->num_tokens()) +
                                                 " tokens in " + std::to_string(shard_windows_.size()) +
                                                 " shard(s), and none holds one sequence of " + std::to_string(T + 1) +
                                                 " tokens (seq_len + 1)");
}

Batch BatchSampler::next(int32_t batch) {
  const int32_t T = options_.seq_len;
  Batch out;
  out.batch = batch;
  out.seq_len = T;
  out.tokens.resize(size_t(batch) * T);
  out.targets.resize(size_t(batch) * T);
  if (source_->packed()) out.positions.resize(size_t(batch) * T);
  std::vector<int32_t> window(size_t(T) + 1);
  std::vector<uint8_t> mask(source_->has_loss_mask() ? size_t(T) + 1 : 0);
  for (int32_t b = 0; b < batch; ++b, ++taken_) {
    if (taken_ > kMaxSamples / options_.dp_size)
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT, source_->describe() + ": more than " + std::to_string(kMaxSamples) +
                                                     " samples taken; the sample index would overflow");
    const Sample s = sample_at(taken_ * options_.dp_size + options_.dp_rank);
    const int64_t first = shard_first_token_[s.shard] + s.window * T;
    source_->read(first, T + 1, window.data());
    std::copy(window.begin(), window.end() - 1, out.tokens.begin() + size_t(b) * T);
    std::copy(window.begin() + 1, window.end(), out.targets.begin() + size_t(b) * T);
    if (!mask.empty()) {  // a target not learned is -1 (model.h: the loss skips it)
      source_->read_mask(first, T + 1, mask.data());
      // In a packed shard a document's first token is never the target of the one before it.
      const uint8_t unlearned = source_->packed() ? kMaskDocumentStart : 0;
      for (int32_t t = 0; t < T; ++t)
        if (!(mask[size_t(t) + 1] & kMaskLearned) || (mask[size_t(t) + 1] & unlearned))
          out.targets[size_t(b) * T + size_t(t)] = -1;
    }
    if (!out.positions.empty()) {  // positions restart at each document; a window starts one
      int32_t* positions = out.positions.data() + size_t(b) * T;
      for (int32_t t = 0; t < T; ++t)
        positions[t] = t == 0 || (mask[size_t(t)] & kMaskDocumentStart) ? 0 : positions[t - 1] + 1;
    }
  }
  return out;
}

BatchSampler::Sample BatchSampler::sample_at(int64_t global_index) {
  Sample s;
  s.epoch = global_index / samples_per_epoch_;
  const int64_t in_epoch = global_index % samples_per_epoch_;
  if (s.epoch != order_epoch_) {
    shard_order_.resize(shard_windows_.size());
    std::iota(shard_order_.begin(), shard_order_.end(), 0);
    if (options_.shuffle) shuffle_in_place(shard_order_, epoch_stream(options_.seed, s.epoch));
    windows_before_.assign(1, 0);
    for (int64_t shard : shard_order_) windows_before_.push_back(windows_before_.back() + shard_windows_[shard]);
    order_epoch_ = s.epoch;
  }
  // The last position whose running count is <= in_epoch is a shard with windows left.
  const size_t slot = size_t(std::upper_bound(windows_before_.begin(), windows_before_.end(), in_epoch) -
                             windows_before_.begin()) - 1;
  s.shard = shard_order_[slot];
  const int64_t local = in_epoch - windows_before_[slot];
  s.window = options_.shuffle ? int64_t(window_order(s.epoch, s.shard)[size_t(local)]) : local;
  return s;
}

const std::vector<uint32_t>& BatchSampler::window_order(int64_t epoch, int64_t shard) {
  if (epoch != cached_epoch_ || shard != cached_shard_) {
    cached_windows_.resize(size_t(shard_windows_[shard]));
    std::iota(cached_windows_.begin(), cached_windows_.end(), 0u);
    shuffle_in_place(cached_windows_, mix64(epoch_stream(options_.seed, epoch) ^ mix64(0x77696E646F77ull + shard)));
    cached_epoch_ = epoch;
    cached_shard_ = shard;
  }
  return cached_windows_;
}

// Shard sizes and the tokens at both ends of each shard: cheap to compute from memory-mapped
// shards and enough to notice a different or re-tokenized dataset.
std::string BatchSampler::fingerprint() const {
  const std::vector<int64_t> counts = source_->shard_token_counts();
  uint64_t h = mix64(counts.size());
  std::vector<int32_t> ends(kFingerprintTokens);
  for (size_t i = 0; i < counts.size(); ++i) {
    h = mix64(h ^ uint64_t(counts[i]));
    const int64_t n = std::min(counts[i], kFingerprintTokens);
    for (int64_t start : {shard_first_token_[i], shard_first_token_[i] + counts[i] - n}) {
      source_->read(start, n, ends.data());
      for (int64_t t = 0; t < n; ++t) h = mix64(h ^ uint64_t(uint32_t(ends[t])));
    }
  }
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

nlohmann::json BatchSampler::state() const { return state_at(taken_); }

nlohmann::json BatchSampler::state_at(int64_t taken) const {
  const int64_t consumed = taken * options_.dp_size;  // by all ranks together: they stay in step
  return {{"epoch", consumed / samples_per_epoch_},
          {"position", consumed % samples_per_epoch_},
          {"seed", options_.seed},
          {"shuffle", options_.shuffle},
          {"seq_len", options_.seq_len},
          {"samples_per_epoch", samples_per_epoch_},
          {"fingerprint", fingerprint()}};
}

void BatchSampler::restore(const nlohmann::json& state) {
  for (const char* key : {"epoch", "position", "seed", "shuffle", "seq_len", "samples_per_epoch", "fingerprint"})
    if (!state.is_object() || !state.contains(key)) throw bad_state(std::string("missing \"") + key + "\"");
  try {
    const int64_t saved_seq_len = state_integer(state, "seq_len", 1, INT32_MAX);
    if (saved_seq_len != options_.seq_len)
      throw bad_state("saved with seq_len " + std::to_string(saved_seq_len) + ", but this run has seq_len " +
                      std::to_string(options_.seq_len));
    const int64_t saved_samples = state_integer(state, "samples_per_epoch", 1, kMaxSamples);
    if (!state["fingerprint"].is_string()) throw bad_state("fingerprint: expected a string, found " + state["fingerprint"].dump());
    const std::string saved_fingerprint = state["fingerprint"].get<std::string>();
    if (saved_samples != samples_per_epoch_ || saved_fingerprint != fingerprint())
      throw bad_state("saved for a dataset of " + std::to_string(saved_samples) + " samples per epoch (fingerprint " +
                      saved_fingerprint + "), but " + source_->describe() + " gives " +
                      std::to_string(samples_per_epoch_) + " (fingerprint " + fingerprint() +
                      "): resume with the same data files");
    if (!state["seed"].is_number_unsigned()) throw bad_state("seed: expected an integer >= 0, found " + state["seed"].dump());
    const uint64_t saved_seed = state["seed"].get<uint64_t>();
    if (saved_seed != options_.seed)
      throw bad_state("saved with seed " + std::to_string(saved_seed) + ", but this run has seed " +
                      std::to_string(options_.seed) + ": the sample order would differ");
    if (!state["shuffle"].is_boolean()) throw bad_state("shuffle: expected true or false, found " + state["shuffle"].dump());
    if (state["shuffle"].get<bool>() != options_.shuffle)
      throw bad_state("saved with shuffle " + state["shuffle"].dump() + ", but this sampler has shuffle " +
                      (options_.shuffle ? "true" : "false"));
    const int64_t epoch = state_integer(state, "epoch", INT64_MIN, INT64_MAX);
    const int64_t position = state_integer(state, "position", INT64_MIN, INT64_MAX);
    if (epoch < 0 || position < 0 || position >= samples_per_epoch_)
      throw bad_state("epoch " + std::to_string(epoch) + ", position " + std::to_string(position) +
                      " is outside an epoch of " + std::to_string(samples_per_epoch_) + " samples");
    if (epoch > (kMaxSamples - position) / samples_per_epoch_)
      throw bad_state("epoch " + std::to_string(epoch) + " of " + std::to_string(samples_per_epoch_) +
                      " samples is more samples than a run can take (at most " + std::to_string(kMaxSamples) + ")");
    const int64_t consumed = epoch * samples_per_epoch_ + position;
    if (consumed % options_.dp_size != 0)
      throw bad_state(std::to_string(consumed) + " samples consumed do not divide among " +
                      std::to_string(options_.dp_size) + " data-parallel ranks");
    taken_ = consumed / options_.dp_size;
  } catch (const nlohmann::json::exception& e) {
    throw bad_state(std::string("a field has the wrong type: ") + e.what());
  }
}

int64_t BatchSampler::most_samples_taken() const { return kMaxSamples / options_.dp_size; }

void BatchSampler::set_samples_taken(int64_t taken) {
  if (taken < 0 || taken > kMaxSamples / options_.dp_size)
    throw bad_state("samples_taken " + std::to_string(taken) + " is outside [0, " +
                    std::to_string(kMaxSamples / options_.dp_size) + "]");
  taken_ = taken;
}

}  // namespace keel
