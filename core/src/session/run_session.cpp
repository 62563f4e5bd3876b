// Throughput is measured over each logging interval and excludes evaluation and checkpoint
// time, so tokens/s and MFU describe training alone.
#include "session/run_session.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_paths.h"
#include "host/errors.h"
#include "io/writable_folder.h"
#include "metrics/run_reporter.h"
#include "session/interval_traffic.h"
#include "session/run_summary.h"
#include "mesh/stop_signals.h"

namespace keel {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Whether a step from `before` to `after` passed a multiple of `every` (0: never). A step moves by
// one, except with replicas that step on their own, whose intervals move by several.
bool passes_multiple(int64_t before, int64_t after, int64_t every) { return every > 0 && after / every > before / every; }

// KEEL_FAULT_INJECT="rank=R,step=S[,mode=error|kill|kill_while_saving]" makes rank R fail (or die
// by SIGKILL) after step S, or die while the background save of step S has written its file
// but not yet published the checkpoint: how the tests show that one failing rank ends every rank
// with its reason, and that a crash mid-save keeps the previous checkpoint.
struct InjectedFault {
  int rank = -1;
  long long step = -1;
  std::string mode;
};

const InjectedFault& injected_fault() {
  static const InjectedFault fault = [] {
    InjectedFault f;
    const char* spec = std::getenv("KEEL_FAULT_INJECT");
    char mode[24] = "error";
    if (spec) std::sscanf(spec, "rank=%d,step=%lld,mode=%23s", &f.rank, &f.step, mode);
    f.mode = mode;
    return f;
  }();
  return fault;
}

void maybe_inject_fault(const Trainer& trainer, int64_t step) {
  const InjectedFault& fault = injected_fault();
  if (fault.rank != trainer.mesh().world.rank || fault.step != step || fault.mode == "kill_while_saving") return;
  if (fault.mode == "kill") std::raise(SIGKILL);
  throw KeelError(KEEL_ERR_INTERNAL, "injected fault after step " + std::to_string(step) + " (KEEL_FAULT_INJECT)");
}

std::function<void()> fault_while_saving(const Trainer& trainer, int64_t step) {
  const InjectedFault& fault = injected_fault();
  if (fault.rank != trainer.mesh().world.rank || fault.step != step || fault.mode != "kill_while_saving") return {};
  return [] { std::raise(SIGKILL); };
}

ReporterOptions reporter_options(const Trainer& trainer, bool reporting, bool append) {
  const TrainConfig& train = trainer.config().train;
  ReporterOptions options;
  options.metrics_path = reporting ? train.metrics_path : "/dev/null";
  options.append = append;
  options.resumed_step = trainer.step();
  options.tensorboard_dir = reporting ? train.tensorboard_dir : "";
  options.progress_bar = reporting && ::isatty(STDOUT_FILENO) == 1;
  return options;
}

StepReport phase_report(const Trainer& trainer, const StepResult& result) {
  StepReport report;
  report.phase_ms = {{"data", 1e3 * result.data_seconds},
                     {"forward", 1e3 * result.forward_seconds},
                     {"backward", 1e3 * result.backward_seconds},
                     {"optimizer", 1e3 * result.optimizer_seconds}};
  if (trainer.mesh().layout().pp > 1) report.phase_ms["pipeline_wait"] = 1e3 * result.pipeline_wait_seconds;
  return report;
}

}  // namespace

struct RunSession::Progress {
  Progress(const Trainer& trainer) : first_step(trainer.step()), traffic(trainer) {}
  const int64_t first_step;
  const Clock::time_point start = Clock::now();
  double train_seconds = 0;  // stepping alone, for the ETA
  double interval_seconds = 0;
  int64_t interval_tokens = 0, interval_steps = 0;
  int64_t last_saved_step = -1;
  IntervalTraffic traffic;
};

RunSession::RunSession(Trainer& trainer, std::ostream& out, bool append)
    : trainer_(trainer),
      reporting_(trainer.mesh().world.rank == 0),
      out_(reporting_ ? out : silent_),
      reporter_(reporter_options(trainer, reporting_, append), out_) {
  // Periodic saves must be possible before any step is spent (keel run also checks at start-up,
  // since it always saves at the end; an embedder's train(n) saves only every N steps).
  if (trainer.config().train.checkpoint.every > 0)
    require_writable_folder(trainer.config().train.checkpoint.dir, "train.checkpoint.dir");
  reporter_.header(describe_run(trainer));
  if (trainer.config().train.checkpoint.async)
    background_saves_ = std::make_unique<AsyncCheckpointWriter>(trainer.mesh().checkpoint_io);
}

void RunSession::note_past_horizon(int64_t until_step) {
  const TrainConfig& train = trainer_.config().train;
  if (until_step <= train.steps || noted_past_horizon_) return;
  noted_past_horizon_ = true;
  reporter_.note("training to step " + std::to_string(until_step) + ", past train.steps (" +
                 std::to_string(train.steps) + "): the learning-rate schedule, whose horizon is train.steps, "
                 "holds its final value there");
}

std::string RunSession::save(Progress& progress, StepReport* report) {
  const CheckpointConfig& checkpoint = trainer_.config().train.checkpoint;
  // The previous background save first: its time is not this save's stall.
  if (background_saves_) finish_background_save();
  const auto start = Clock::now();
  if (background_saves_) {
    PendingCheckpoint snapshot =
        snapshot_checkpoint(trainer_.state_view(), trainer_.position(), checkpoint.dir, checkpoint.keep, background_saves_->arena());
    const double ms = 1e3 * seconds_since(start);
    background_saves_->start(std::move(snapshot), trainer_.step(), fault_while_saving(trainer_, trainer_.step()));
    if (report) report->phase_ms["checkpoint"] = ms;
    reporter_.note("checkpoint of step " + std::to_string(trainer_.step()) + ": snapshot taken (" +
                   std::to_string(int64_t(ms)) + " ms), writing in the background");
    progress.last_saved_step = trainer_.step();
    return (std::filesystem::path(checkpoint.dir) / step_folder_name(trainer_.step())).string();
  }
  const std::string folder = save_checkpoint(trainer_.state_view(), trainer_.position(), checkpoint.dir, checkpoint.keep);
  const double ms = 1e3 * seconds_since(start);
  if (report) report->phase_ms["checkpoint"] = ms;
  reporter_.note("checkpoint saved: " + folder + " (" + std::to_string(int64_t(ms)) + " ms)");
  progress.last_saved_step = trainer_.step();
  return folder;
}

void RunSession::finish_background_save() {
  if (const auto written = background_saves_ ? background_saves_->wait() : std::nullopt)
    reporter_.note("checkpoint saved: " + written->folder + " (written in the background in " +
                   std::to_string(int64_t(1e3 * written->seconds)) + " ms)");
}

StepReport RunSession::logged_report(const StepResult& result, const RunSlice& slice, Progress& progress,
                                     bool evaluate, StepReport report) {
  report.step = result.step;
  report.total_steps = slice.until_step;
  report.loss = result.loss;
  report.lr = result.lr;
  report.grad_norm = result.grad_norm;
  report.step_ms = 1e3 * result.step_seconds;
  report.tokens_per_s = progress.interval_tokens / std::max(progress.interval_seconds, 1e-9);
  report.mfu = trainer_.mfu(report.tokens_per_s);
  report.elapsed_s = seconds_since(progress.start);
  report.eta_s = progress.train_seconds / double(result.step - progress.first_step) * double(slice.until_step - result.step);
  report.memory_bytes = resident_memory_bytes();
  report.skipped = result.skipped;
  report.extra["tokens"] = trainer_.tokens_seen();  // trained so far, over every data-parallel rank
  if (std::isfinite(result.noise_scale)) report.extra["noise_scale"] = result.noise_scale;
  if (trainer_.config().data.batch_schedule.enabled) report.extra["global_batch"] = result.global_batch;
  if (!result.replica_steps.empty()) report.extra["replica_steps"] = result.replica_steps;
  for (const ModelMetric& m : result.model_metrics) report.extra["model"][m.name] = m.value;
  const keel_strategy_info memory = trainer_.strategy_state().info();
  report.extra["strategy_bytes"] = {{"params", memory.param_bytes}, {"grads", memory.grad_bytes},
                                    {"optimizer_state", memory.state_bytes}};
  if (trainer_.mesh().layout().pp > 1) report.extra["pp_peak_in_flight"] = result.peak_in_flight;  // rank 0's stage
  progress.traffic.report(report, progress.interval_steps, progress.interval_seconds);
  if (evaluate) report.val_loss = trainer_.evaluate();
  progress.traffic.restart_after_evaluation();
  progress.interval_steps = 0;
  progress.interval_seconds = 0;
  progress.interval_tokens = 0;
  return report;
}

void RunSession::stop_if_signalled(const StepResult& result, const RunSlice& slice, Progress& progress) {
  const int signal_number = agreed_stop_signal(trainer_.mesh().world);
  if (!signal_number) return;
  // Every rank agreed on this step, so every rank takes part in the save.
  if (trainer_.config().train.checkpoint.on_interrupt && progress.last_saved_step != result.step)
    save(progress, nullptr);
  finish_background_save();  // so the last checkpoint named below is on disk
  reporter_.finish();
  throw StopRequested(signal_number, "stopped by " + signal_name(signal_number) + " after step " +
                                         std::to_string(result.step) + " of " + std::to_string(slice.until_step) + "; " +
                                         (progress.last_saved_step >= 0
                                              ? "this run's last checkpoint is step " + std::to_string(progress.last_saved_step)
                                              : std::string("this run saved no checkpoint")));
}

void RunSession::run(const RunSlice& slice) {
  const TrainConfig& train = trainer_.config().train;
  note_past_horizon(slice.until_step);
  // Every rank trains, evaluates and checkpoints; rank 0 alone reports.
  Progress progress(trainer_);
  while (trainer_.step() < slice.until_step) {
    const int64_t before = trainer_.step();
    const StepResult result = trainer_.train_step();
    maybe_inject_fault(trainer_, result.step);
    progress.train_seconds += result.step_seconds;
    progress.interval_seconds += result.step_seconds;
    progress.interval_tokens += result.tokens;
    ++progress.interval_steps;
    if (result.skipped) reporter_.note("step " + std::to_string(result.step) + ": non-finite values, update skipped");

    StepReport report = phase_report(trainer_, result);
    StepOutcome outcome;
    if (passes_multiple(before, result.step, train.checkpoint.every)) outcome.checkpoint = save(progress, &report);
    if (background_saves_ && background_saves_->failed()) finish_background_save();  // throws its failure
    const bool last = (before < train.steps && result.step >= train.steps) ||
                      (slice.ends_run && result.step >= slice.until_step);
    const bool evaluate = last || passes_multiple(before, result.step, train.eval_every);
    const bool logged = evaluate || before == progress.first_step ||
                        passes_multiple(before, result.step, train.log_every) || result.skipped;
    if (logged) {
      const StepReport logged_step = logged_report(result, slice, progress, evaluate, std::move(report));
      outcome.val_loss = logged_step.val_loss;
      reporter_.step(logged_step);
    }
    if (slice.after_step && slice.after_step(result, outcome)) break;
    stop_if_signalled(result, slice, progress);
  }
  if (slice.ends_run && trainer_.step() > progress.first_step && progress.last_saved_step != trainer_.step())
    save(progress, nullptr);
  finish_background_save();  // a slice ends with its checkpoints on disk
  reporter_.finish();
  // Every rank samples (the same tokens, from the same seed): a sharding strategy gathers each
  // layer over the whole group, so a forward on rank 0 alone would wait for the others forever.
  if (slice.ends_run && train.sample_tokens > 0) print_sample(trainer_, out_);
}

void run_training(Trainer& trainer, std::ostream& out, bool resumed) {
  RunSession session(trainer, out, resumed);
  RunSlice slice;
  slice.until_step = trainer.config().train.steps;
  try {
    session.run(slice);
  } catch (const StopRequested&) {
    throw;
  } catch (const std::exception& e) {
    // End the other ranks now, naming why: the session's end waits for a background save, whose
    // collectives the other ranks (stuck in the step this rank left) would never join.
    trainer.abort_all_ranks(e);
    throw;
  }
}

}  // namespace keel
