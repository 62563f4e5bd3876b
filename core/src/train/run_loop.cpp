// Throughput is measured over each logging interval and excludes evaluation time, so tokens/s
// and MFU describe training alone.
#include "train/run_loop.h"

#include <chrono>
#include <cmath>

#include "host/errors.h"
#include "metrics/metrics_log.h"
#include "metrics/progress.h"

namespace keel {
namespace {

std::string printable(const std::vector<int32_t>& bytes) {
  std::string text;
  for (int32_t b : bytes) {
    if (b == '\n' || b == '\t' || (b >= 32 && b < 127)) text += char(b);
    else if (b >= 128 && b < 256) text += char(b);  // part of a UTF-8 sequence
    else text += '?';
  }
  return text;
}

}  // namespace

void run_training(Trainer& trainer, std::ostream& out) {
  const RunConfig& config = trainer.config();
  const TrainConfig& train = config.train;
  const keel_model_info& info = trainer.model_info();
  MetricsLog metrics(train.metrics_path, false);

  int64_t n_elements = 0;
  for (size_t i = 0; i < info.n_params; ++i) {
    int64_t numel = 1;
    for (int32_t d = 0; d < info.params[i].ndim; ++d) numel *= info.params[i].global_shape[d];
    n_elements += numel;
  }
  out << "model " << config.model.plugin << ": " << n_elements << " parameters in " << info.n_params << " tensors, "
      << info.n_layers << " layers; batch " << config.data.global_batch << " × " << trainer.seq_len() << " tokens ("
      << trainer.accumulation_steps() << " micro-steps of " << config.data.micro_batch << "); " << train.steps
      << " steps; peak " << trainer.peak_flops() / 1e9 << " GFLOP/s; metrics → " << metrics.path() << std::endl;

  double train_seconds = 0, interval_seconds = 0;
  int64_t interval_tokens = 0;
  const auto run_start = std::chrono::steady_clock::now();
  for (int64_t s = trainer.step(); s < train.steps; ++s) {
    StepResult result = trainer.train_step();
    if (!std::isfinite(result.loss))
      throw KeelError(KEEL_ERR_NONFINITE, "step " + std::to_string(result.step) + ": the training loss is not finite (" +
                                              std::to_string(result.loss) + "); lower optimizer.lr or set train.grad_clip");
    train_seconds += result.step_seconds;
    interval_seconds += result.step_seconds;
    interval_tokens += result.tokens;
    const bool last = result.step == train.steps;
    const bool evaluate = last || (train.eval_every > 0 && result.step % train.eval_every == 0);
    const bool log = evaluate || result.step == 1 || result.step % train.log_every == 0;
    if (!log) continue;

    ProgressLine line;
    line.step = result.step;
    line.total_steps = train.steps;
    line.loss = result.loss;
    line.lr = result.lr;
    line.grad_norm = result.grad_norm;
    line.tokens_per_s = interval_tokens / std::max(interval_seconds, 1e-9);
    line.mfu = trainer.flops_per_token() * line.tokens_per_s / trainer.peak_flops();
    line.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
    line.eta_s = train_seconds / double(result.step) * double(train.steps - result.step);
    if (evaluate) line.val_loss = trainer.evaluate();
    out << format_progress(line) << std::endl;

    nlohmann::json record = {{"step", line.step}, {"loss", line.loss}, {"lr", line.lr}, {"grad_norm", line.grad_norm},
                             {"tokens_per_s", line.tokens_per_s}, {"mfu", line.mfu}, {"step_ms", 1e3 * result.step_seconds},
                             {"elapsed_s", line.elapsed_s}};
    if (evaluate) record["val_loss"] = line.val_loss;
    metrics.write(record);
    interval_seconds = 0;
    interval_tokens = 0;
  }

  if (train.sample_tokens > 0) {
    std::vector<int32_t> prompt;
    for (unsigned char c : train.sample_prompt) prompt.push_back(c);
    if (info.vocab_size < 256) prompt.assign(1, 0);  // not a byte-level model: start from token 0
    auto generated = trainer.sample(prompt, train.sample_tokens, train.seed);
    out << "--- sample (" << train.sample_tokens << " tokens) ---\n";
    if (info.vocab_size == 256) out << train.sample_prompt << printable(generated);
    else for (int32_t t : generated) out << t << ' ';
    out << "\n---" << std::endl;
  }
}

}  // namespace keel
