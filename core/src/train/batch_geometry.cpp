// The checks of batch_geometry.h, in the order a reader would ask them: how long is a sequence,
// does sequence parallelism split it, how many sequences does a micro-step take, how many
// micro-steps make a step, and does one micro-batch fit the bound.
#include "train/batch_geometry.h"

#include <string>

#include "host/errors.h"

namespace keel {
namespace {

std::string text(int64_t n) { return std::to_string(n); }

[[noreturn]] void refuse(const RunConfig& config, const std::string& problem) {
  throw KeelError(KEEL_ERR_INVALID_CONFIG, config.file + ": " + problem);
}

}  // namespace

BatchGeometry check_batch_geometry(const RunConfig& config, int64_t dp_size, int32_t tp_size, int32_t model_max_seq_len) {
  const DataConfig& data = config.data;
  BatchGeometry geometry;
  // data.seq_len 0 means the model's own; say which key the number came from.
  const std::string seq_len_key = data.seq_len > 0 ? "data.seq_len" : "model.seq_len";
  geometry.seq_len = data.seq_len > 0 ? data.seq_len : model_max_seq_len;
  if (geometry.seq_len > model_max_seq_len)
    refuse(config, "data.seq_len: " + text(geometry.seq_len) + " is longer than the model's maximum sequence length " +
                       text(model_max_seq_len));
  if (config.cp > 1 && geometry.seq_len % (2 * config.cp) != 0)
    refuse(config, seq_len_key + " (" + text(geometry.seq_len) + ") must be a multiple of 2 × parallel.cp (" +
                       text(2 * config.cp) + "): each of the cp " + text(config.cp) + " ranks holds two of the 2·cp "
                       "equal chunks of every sequence");
  if (config.cp > 1 && config.sequence_parallel && geometry.seq_len % (2 * config.cp * tp_size) != 0)
    refuse(config, seq_len_key + " (" + text(geometry.seq_len) + ") must be a multiple of 2 × parallel.cp × parallel.tp (" +
                       text(2 * config.cp * tp_size) + ") with parallel.sequence_parallel: each chunk's tokens are "
                       "split over the tensor-parallel ranks");
  if (config.sequence_parallel && geometry.seq_len % tp_size != 0)
    refuse(config, seq_len_key + " (" + text(geometry.seq_len) + ") must be a multiple of parallel.tp (" + text(tp_size) +
                       ") with parallel.sequence_parallel: each tensor-parallel rank holds seq_len/tp of every sequence");

  const int64_t sequences_per_micro_step = int64_t(data.micro_batch) * dp_size;
  if (sequences_per_micro_step > data.global_batch)
    refuse(config, "data.global_batch: " + text(data.global_batch) + " sequences per step are fewer than data.micro_batch " +
                       text(data.micro_batch) + " × dp " + text(dp_size) + " = " + text(sequences_per_micro_step) +
                       " sequences per micro-step (each data-parallel rank takes data.micro_batch at least once a "
                       "step); data.global_batch must be a multiple of that product, at most 2^30");
  if (data.global_batch % sequences_per_micro_step != 0)
    refuse(config, "data.global_batch: " + text(data.global_batch) + " sequences per step do not divide into data.micro_batch " +
                       text(data.micro_batch) + " × dp " + text(dp_size) + " (= " + text(sequences_per_micro_step) +
                       " per micro-step); use a multiple of " + text(sequences_per_micro_step));
  geometry.micro_steps = int32_t(data.global_batch / sequences_per_micro_step);  // <= global_batch <= 2^30
  if (geometry.micro_steps > kMaxMicroStepsPerStep)
    refuse(config, "data.global_batch: " + text(data.global_batch) + " sequences per step are " +
                       text(geometry.micro_steps) + " micro-batches per data-parallel rank (micro_batch " +
                       text(data.micro_batch) + " × dp " + text(dp_size) + "), more than the " +
                       text(kMaxMicroStepsPerStep) + " a step may hold; raise data.micro_batch or lower "
                       "data.global_batch");

  const int64_t tokens_per_micro_batch = int64_t(data.micro_batch) * geometry.seq_len;
  if (tokens_per_micro_batch > kMaxTokensPerMicroBatch)
    refuse(config, "data.micro_batch " + text(data.micro_batch) + " × " + seq_len_key + " " + text(geometry.seq_len) +
                       " = " + text(tokens_per_micro_batch) + " tokens per micro-batch, more than " +
                       text(kMaxTokensPerMicroBatch) + " (the int32 bound of a micro-batch's token arrays); lower one of them");
  return geometry;
}

}  // namespace keel
