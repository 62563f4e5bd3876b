// Training with everything a run reports: progress, metrics and TensorBoard events, periodic
// validation and checkpoints. `keel run` trains to train.steps in one go; the embedding API's
// keel_trainer_train runs the same loop a number of steps at a time through one RunSession.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>

#include "metrics/run_reporter.h"
#include "session/async_checkpoint.h"
#include "train/trainer.h"

namespace keel {

// What a step did beyond its StepResult, for RunSlice::after_step.
struct StepOutcome {
  std::optional<double> val_loss;  // the step evaluated
  std::string checkpoint;          // the folder the step saved to ("" if none)
};

struct RunSlice {
  int64_t until_step = 0;  // train while trainer.step() is below this
  // The slice ends the run (`keel run`): after its last step, evaluate, save a checkpoint and
  // print the sample of train.sample_tokens. keel_trainer_train's slices leave that to the caller.
  bool ends_run = true;
  // Called after each step (after its checkpoint and report); true stops after that step.
  std::function<bool(const StepResult&, const StepOutcome&)> after_step;
};

// One reporter (metrics file, TensorBoard events, progress on `out`) kept across slices, so
// that repeated keel_trainer_train calls write one metrics file and one event file.
class RunSession {
 public:
  // `append`: continue an existing metrics file (a resumed run) rather than start it anew.
  RunSession(Trainer& trainer, std::ostream& out, bool append);
  // Trains one slice. The learning-rate schedule's horizon is train.steps whatever the slice:
  // slices past it train at the schedule's final value.
  void run(const RunSlice& slice);

 private:
  struct Progress;  // a slice's clocks and counts (run_session.cpp)
  void note_past_horizon(int64_t until_step);
  // Saves a checkpoint and says so; the time training stood still goes into `report` when one
  // is given. With train.checkpoint.async only the snapshot is taken here (async_checkpoint.h).
  // Returns the step folder it saves to.
  std::string save(Progress& progress, StepReport* report);
  // Waits for the asynchronous save in flight, if any, and says it was published.
  void finish_background_save();
  // The report of a logged step: the step's figures, throughput over the interval, memory,
  // traffic, and the validation loss on evaluation steps.
  StepReport logged_report(const StepResult& result, const RunSlice& slice, Progress& progress, bool evaluate,
                           StepReport report);
  // Throws StopRequested once every rank agrees a signal asked the run to stop.
  void stop_if_signalled(const StepResult& result, const RunSlice& slice, Progress& progress);

  Trainer& trainer_;
  bool reporting_;           // rank 0 alone reports, so a run under mpirun prints one story
  std::ostringstream silent_;
  std::ostream& out_;
  RunReporter reporter_;
  bool noted_past_horizon_ = false;
  std::unique_ptr<AsyncCheckpointWriter> background_saves_;  // with train.checkpoint.async
};

// `keel run`: train to train.steps, then checkpoint and sample. `resumed`: the trainer was loaded
// from a checkpoint; its metrics file is appended to.
void run_training(Trainer& trainer, std::ostream& out, bool resumed);

}  // namespace keel
