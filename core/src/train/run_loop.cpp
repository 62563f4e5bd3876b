// Throughput is measured over each logging interval and excludes evaluation and checkpoint
// time, so tokens/s and MFU describe training alone.
#include "train/run_loop.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>

#include "checkpoint/checkpoint.h"
#include "host/errors.h"
#include "io/writable_folder.h"
#include "metrics/run_reporter.h"
#include "train/stop_signals.h"

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

std::string describe_run(const Trainer& trainer) {
  const RunConfig& config = trainer.config();
  const keel_model_info& info = trainer.model_info();
  std::ostringstream text;
  text << "model " << config.model.plugin << ": " << parameter_count(info) << " parameters in " << info.n_params
       << " tensors" << (trainer.pp_size() > 1 ? " on pipeline stage " + std::to_string(trainer.pp_rank()) + " of " +
                                                  std::to_string(trainer.pp_size())
                                            : std::string())
       << ", " << info.n_layers << " layers; batch " << config.data.global_batch << " × " << trainer.seq_len()
       << " tokens (" << trainer.accumulation_steps() << " micro-steps of " << config.data.micro_batch << "); "
       << config.train.steps << " steps; peak " << trainer.peak_flops() / 1e9 << " GFLOP/s";
  if (trainer.world_size() > 1) text << " per rank × " << trainer.world_size() << " ranks (tp " << trainer.tp_size() << " × dp " << trainer.dp_size() << " × pp " << trainer.pp_size() << ")";
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
  auto generated = trainer.sample(prompt, train.sample_tokens, train.seed, train.sample_temperature);
  out << "--- sample (" << train.sample_tokens << " tokens) ---\n";
  if (bytes) out << train.sample_prompt << printable(generated);
  else for (int32_t t : generated) out << t << ' ';
  out << "\n---" << std::endl;
}

// KEEL_FAULT_INJECT="rank=R,step=S[,mode=error|kill]" makes rank R fail (or die by SIGKILL)
// after step S: how the tests show that one failing rank ends every rank with its reason.
void maybe_inject_fault(const Trainer& trainer, int64_t step) {
  static const char* spec = std::getenv("KEEL_FAULT_INJECT");
  if (!spec) return;
  int rank = -1;
  long long at_step = -1;
  char mode[16] = "error";
  std::sscanf(spec, "rank=%d,step=%lld,mode=%15s", &rank, &at_step, mode);
  if (rank != trainer.world_rank() || at_step != step) return;
  if (std::string(mode) == "kill") std::raise(SIGKILL);
  throw KeelError(KEEL_ERR_INTERNAL, "injected fault after step " + std::to_string(step) + " (KEEL_FAULT_INJECT)");
}

// The stop signal every rank agrees on after a step: this rank's, or SIGTERM when only another
// rank was signalled (one small all_gather per step on more than one rank). 0: go on.
int agreed_stop_signal(Trainer& trainer) {
  const int mine = pending_stop_signal();
  if (trainer.world_size() == 1) return mine;
  const double signalled = trainer.sum_over_world(mine ? 1.0 : 0.0);
  return mine ? mine : signalled > 0 ? SIGTERM : 0;
}

ReporterOptions reporter_options(const Trainer& trainer, bool reporting, bool append) {
  const TrainConfig& train = trainer.config().train;
  ReporterOptions options;
  options.metrics_path = reporting ? train.metrics_path : "/dev/null";
  options.append = append;
  options.tensorboard_dir = reporting ? train.tensorboard_dir : "";
  options.progress_bar = reporting && ::isatty(STDOUT_FILENO) == 1;
  return options;
}

}  // namespace

RunSession::RunSession(Trainer& trainer, std::ostream& out, bool append)
    : trainer_(trainer),
      reporting_(trainer.world_rank() == 0),
      out_(reporting_ ? out : silent_),
      reporter_(reporter_options(trainer, reporting_, append), out_) {
  // Periodic saves must be possible before any step is spent (keel run also checks at start-up,
  // since it always saves at the end; an embedder's train(n) saves only every N steps).
  if (trainer.config().train.checkpoint.every > 0)
    require_writable_folder(trainer.config().train.checkpoint.dir, "train.checkpoint.dir");
  reporter_.header(describe_run(trainer));
}

void RunSession::run(const RunSlice& slice) {
  using clock = std::chrono::steady_clock;
  Trainer& trainer = trainer_;
  RunReporter& reporter = reporter_;
  const TrainConfig& train = trainer.config().train;
  // Every rank trains, evaluates and checkpoints; rank 0 alone reports.
  if (slice.until_step > train.steps && !noted_past_horizon_) {
    noted_past_horizon_ = true;
    reporter.note("training to step " + std::to_string(slice.until_step) + ", past train.steps (" +
                  std::to_string(train.steps) + "): the learning-rate schedule, whose horizon is train.steps, "
                  "holds its final value there");
  }

  double train_seconds = 0, interval_seconds = 0;
  int64_t interval_tokens = 0, last_saved_step = -1;
  const int64_t first_step = trainer.step();
  const auto run_start = clock::now();
  auto save = [&](StepReport* report) {
    const auto start = clock::now();
    const std::string folder = save_checkpoint(trainer, train.checkpoint.dir, train.checkpoint.keep);
    const double ms = std::chrono::duration<double, std::milli>(clock::now() - start).count();
    if (report) report->phase_ms["checkpoint"] = ms;
    last_saved_step = trainer.step();
    reporter.note("checkpoint saved: " + folder + " (" + std::to_string(int64_t(ms)) + " ms)");
  };

  // Communication volume per step over each logging interval, by comm.h's convention.
  static const char* const kOpNames[KEEL_COMM_OP_COUNT] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast",
                                                           "send", "recv", "barrier"};
  keel_comm_counters interval_start = trainer.comm_counters();
  keel_comm_counters tp_interval_start = trainer.comm_counters(Trainer::CommGroup::model_tp);
  keel_comm_counters pp_interval_start = trainer.comm_counters(Trainer::CommGroup::pipeline);
  auto per_step_bytes = [&](const keel_comm_counters& now, const keel_comm_counters& start, int64_t steps) {
    nlohmann::json per_step = nlohmann::json::object();
    for (int op = 0; op < KEEL_COMM_OP_COUNT; ++op)
      if (now.bytes[op] > start.bytes[op]) per_step[kOpNames[op]] = double(now.bytes[op] - start.bytes[op]) / double(steps);
    return per_step;
  };
  // The offload tier's traffic per step over each logging interval; its rates over the interval's
  // step time, what the tier had to sustain for training to run at this speed.
  std::optional<keel_offload_counters> offload_start = trainer.offload_counters();
  auto offload_per_step = [&](const keel_offload_counters& now, int64_t steps, double seconds) {
    const double read = double(now.bytes_read - offload_start->bytes_read);
    const double written = double(now.bytes_written - offload_start->bytes_written);
    const double wall = std::max(seconds, 1e-9);
    return nlohmann::json{{"read_bytes_per_step", read / double(steps)},
                          {"write_bytes_per_step", written / double(steps)},
                          {"busy_ms_per_step", 1e3 * (now.busy_seconds - offload_start->busy_seconds) / double(steps)},
                          {"read_GBps", read / wall / 1e9},
                          {"write_GBps", written / wall / 1e9}};
  };
  int64_t interval_steps = 0;
  while (trainer.step() < slice.until_step) {
    StepResult result = trainer.train_step();
    maybe_inject_fault(trainer, result.step);
    train_seconds += result.step_seconds;
    interval_seconds += result.step_seconds;
    interval_tokens += result.tokens;
    if (result.skipped) reporter.note("step " + std::to_string(result.step) + ": non-finite values, update skipped");

    StepReport report;
    report.phase_ms = {{"data", 1e3 * result.data_seconds},
                       {"forward", 1e3 * result.forward_seconds},
                       {"backward", 1e3 * result.backward_seconds},
                       {"optimizer", 1e3 * result.optimizer_seconds}};
    if (trainer.pp_size() > 1) report.phase_ms["pipeline_wait"] = 1e3 * result.pipeline_wait_seconds;
    const bool last = result.step == train.steps || (slice.ends_run && result.step == slice.until_step);
    if (train.checkpoint.every > 0 && result.step % train.checkpoint.every == 0) save(&report);
    ++interval_steps;
    const bool evaluate = last || (train.eval_every > 0 && result.step % train.eval_every == 0);
    const bool logged = evaluate || result.step == first_step + 1 || result.step % train.log_every == 0 || result.skipped;
    if (logged) {
      report.step = result.step;
      report.total_steps = slice.until_step;
      report.loss = result.loss;
      report.lr = result.lr;
      report.grad_norm = result.grad_norm;
      report.step_ms = 1e3 * result.step_seconds;
      report.tokens_per_s = interval_tokens / std::max(interval_seconds, 1e-9);
      report.mfu = trainer.mfu(report.tokens_per_s);
      report.elapsed_s = std::chrono::duration<double>(clock::now() - run_start).count();
      report.eta_s = train_seconds / double(result.step - first_step) * double(slice.until_step - result.step);
      report.memory_bytes = resident_memory_bytes();
      report.skipped = result.skipped;
      const keel_strategy_info memory = trainer.strategy_info();
      report.extra["strategy_bytes"] = {{"params", memory.param_bytes}, {"grads", memory.grad_bytes},
                                        {"optimizer_state", memory.state_bytes}};
      if (trainer.pp_size() > 1) report.extra["pp_peak_in_flight"] = result.peak_in_flight;  // rank 0's stage
      if (trainer.world_size() > 1) {
        const keel_comm_counters now = trainer.comm_counters();
        report.extra["comm_bytes_per_step"] = per_step_bytes(now, interval_start, interval_steps);
        interval_start = now;
        if (trainer.tp_size() > 1) {  // the model's tensor-parallel mappings
          const keel_comm_counters tp_now = trainer.comm_counters(Trainer::CommGroup::model_tp);
          report.extra["tp_comm_bytes_per_step"] = per_step_bytes(tp_now, tp_interval_start, interval_steps);
          tp_interval_start = tp_now;
        }
        if (trainer.pp_size() > 1) {  // activations and their gradients between stages
          const keel_comm_counters pp_now = trainer.comm_counters(Trainer::CommGroup::pipeline);
          report.extra["pp_comm_bytes_per_step"] = per_step_bytes(pp_now, pp_interval_start, interval_steps);
        }
      }
      if (offload_start) {
        const nlohmann::json offload = offload_per_step(*trainer.offload_counters(), interval_steps, interval_seconds);
        report.extra["offload"] = offload;
        report.offload_GBps = {offload["read_GBps"].get<double>(), offload["write_GBps"].get<double>()};
      }
      interval_steps = 0;
      if (evaluate) report.val_loss = trainer.evaluate();
      // Evaluation moves activations too: the next interval starts after it.
      pp_interval_start = trainer.comm_counters(Trainer::CommGroup::pipeline);
      if (offload_start) offload_start = trainer.offload_counters();  // an evaluation reads offloaded params
      reporter.step(report);
      interval_seconds = 0;
      interval_tokens = 0;
    }
    if (slice.after_step && slice.after_step(result)) break;
    if (const int signal_number = agreed_stop_signal(trainer)) {
      reporter.finish();
      throw StopRequested(signal_number,
                          "stopped by " + signal_name(signal_number) + " after step " + std::to_string(result.step) +
                              " of " + std::to_string(slice.until_step) + "; " +
                              (last_saved_step >= 0 ? "this run's last checkpoint is step " + std::to_string(last_saved_step)
                                                    : std::string("this run saved no checkpoint")));
    }
  }
  if (slice.ends_run && trainer.step() > first_step && last_saved_step != trainer.step()) save(nullptr);
  reporter.finish();
  // Every rank samples (the same tokens, from the same seed): a sharding strategy gathers each
  // layer over the whole group, so a forward on rank 0 alone would wait for the others forever.
  if (slice.ends_run && train.sample_tokens > 0) print_sample(trainer, out_);
}

void run_training(Trainer& trainer, std::ostream& out, bool resumed) {
  RunSession session(trainer, out, resumed);
  RunSlice slice;
  slice.until_step = trainer.config().train.steps;
  session.run(slice);
}

}  // namespace keel
