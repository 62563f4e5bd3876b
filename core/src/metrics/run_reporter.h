// Everything a run tells people and tools about itself, step by step: the progress line (or a
// bar on a terminal), the JSONL metrics file, TensorBoard events. The run loop decides what
// happened; the reporter decides how it is shown.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>

#include "metrics/metrics_log.h"

namespace keel {

struct ReporterOptions {
  std::string metrics_path;      // JSONL, one object per logged step
  bool append = false;           // a resumed run appends to its metrics
  int64_t resumed_step = INT64_MAX;  // when appending, records past this step are dropped first
  std::string tensorboard_dir;   // "" → no TensorBoard events
  bool progress_bar = false;     // redraw one line (stdout is a terminal) instead of printing lines
  int columns = 100;             // the bar's width at most
};

struct StepReport {
  int64_t step = 0, total_steps = 0;
  double loss = 0, lr = 0, grad_norm = 0;
  double tokens_per_s = 0, mfu = 0;   // over the interval since the last logged step
  double step_ms = 0;
  double elapsed_s = 0, eta_s = 0;
  std::optional<double> val_loss;
  std::map<std::string, double> phase_ms;  // data, forward, backward, optimizer, checkpoint: this step's
  int64_t memory_bytes = 0;                // resident memory of the process
  bool skipped = false;                    // a non-finite step whose update was skipped
  // The offload tier's read and write rates over the interval (GB/s), when there is a tier.
  std::optional<std::pair<double, double>> offload_GBps;
  nlohmann::json extra = nlohmann::json::object();  // more fields for the JSONL record (memory, comm)
};

class TensorBoardWriter;

class RunReporter {
 public:
  RunReporter(ReporterOptions options, std::ostream& out);
  ~RunReporter();
  // Once, before the first step: what is being trained.
  void header(const std::string& text);
  // A logged step.
  void step(const StepReport& report);
  // A line that must stay on screen (a checkpoint saved, a skipped step).
  void note(const std::string& text);
  // After the last step: ends the bar's line and flushes every output.
  void finish();
  // The TensorBoard event file being written, "" when there is none.
  std::string tensorboard_path() const;

 private:
  void print_line(const std::string& text);   // above the bar, which is redrawn below it
  void erase_bar();                            // blanks the bar's line, cursor at its start
  void draw_bar(const std::string& bar);
  void write_tensorboard(const StepReport& report);

  ReporterOptions options_;
  std::ostream& out_;
  MetricsLog metrics_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;  // null when options_.tensorboard_dir is ""
  std::string bar_;                                 // the bar on screen now, "" when none
};

// Resident memory of this process in bytes (/proc/self/statm), 0 where unknown.
int64_t resident_memory_bytes();

}  // namespace keel
