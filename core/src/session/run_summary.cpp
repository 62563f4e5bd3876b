// What a run says about itself (run_summary.h).
#include "session/run_summary.h"

#include <csignal>
#include <sstream>
#include <vector>

#include "generate/sampling.h"
#include "host/plural.h"
#include "mesh/stop_signals.h"

namespace keel {
namespace {

std::string printable(const std::vector<int32_t>& bytes) {
  std::string text;
  for (int32_t b : bytes) text += (b == '\n' || b == '\t' || (b >= 32 && b < 256 && b != 127)) ? char(b) : '?';
  return text;
}

int64_t parameter_count(const keel_model_info& info) {
  int64_t total = 0;
  for (size_t i = 0; i < info.n_params; ++i) {
    int64_t numel = 1;
    for (int32_t d = 0; d < info.params[i].ndim; ++d) numel *= info.params[i].global_shape[d];
    total += numel;
  }
  return total;
}

}  // namespace

std::string describe_run(const Trainer& trainer) {
  const RunConfig& config = trainer.config();
  const keel_model_info& info = trainer.model_info();
  const MeshLayout& mesh = trainer.mesh().layout();
  std::ostringstream text;
  text << "model " << config.model.plugin << ": " << parameter_count(info) << " parameters in "
       << plural(int64_t(info.n_params), "tensor")
       << (mesh.pp > 1 ? " on pipeline stage " + std::to_string(trainer.mesh().position().pp) + " of " +
                             std::to_string(mesh.pp)
                       : std::string())
       << "; batch " << config.data.global_batch << " × " << trainer.seq_len()
       << " tokens (" << plural(trainer.accumulation_steps(), "micro-step") << " of " << config.data.micro_batch << "); "
       << plural(config.train.steps, "step") << "; peak " << trainer.peak_flops() / 1e9 << " GFLOP/s";
  if (mesh.ranks > 1) text << " per rank × " << mesh.describe();
  if (mesh.pp > 1) text << "; schedule " << config.schedule.plugin;
  text << "; metrics → " << config.train.metrics_path;
  if (trainer.step() > 0) text << "; resumed at step " << trainer.step();
  return text.str();
}

void print_sample(Trainer& trainer, std::ostream& out) {
  const TrainConfig& train = trainer.config().train;
  const keel_model_info& info = trainer.model_info();
  std::vector<int32_t> prompt;
  for (unsigned char c : train.sample_prompt) prompt.push_back(c);
  const bool bytes = info.vocab_size == 256;
  if (!bytes) prompt.assign(1, 0);  // not a byte-level model: start from token 0
  // Streamed as it is drawn; Ctrl-C or SIGTERM ends it after the token in progress, on every rank.
  out << "--- sample (" << plural(train.sample_tokens, "token") << ") ---\n";
  if (bytes) out << train.sample_prompt;
  out << std::flush;
  int stop_signal = 0;
  const int64_t generated = sample_each(
      trainer, prompt, train.sample_tokens, train.seed, train.sample_temperature, 0, 1.0, true, [&](int32_t token, int64_t) {
        if (bytes) out << printable({token});
        else out << token << ' ';
        out << std::flush;
        stop_signal = pending_stop_signal();
        return stop_signal != 0;
      });
  out << "\n---" << std::endl;
  if (generated < train.sample_tokens) {
    const int agreed = agreed_stop_signal(trainer.mesh().world);  // a rank not signalled stopped with the others
    throw StopRequested(agreed ? agreed : SIGTERM, "stopped by " + signal_name(agreed ? agreed : SIGTERM) +
                                                       " during the closing sample, after " + std::to_string(generated) +
                                                       " of " + std::to_string(train.sample_tokens) +
                                                       " tokens; training had finished and was saved as configured");
  }
}

}  // namespace keel
