// Each logged step goes to three places: the screen (plain lines, or one bar redrawn with '\r'
// on a terminal), the JSONL metrics file, and TensorBoard events when a folder is configured.
#include "metrics/run_reporter.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <tuple>

#include "host/log.h"
#include "metrics/progress.h"
#include "metrics/tensorboard_writer.h"

namespace keel {

RunReporter::RunReporter(ReporterOptions options, std::ostream& out)
    : options_(std::move(options)), out_(out), metrics_(options_.metrics_path, options_.append, options_.resumed_step) {
  if (!options_.tensorboard_dir.empty()) tensorboard_ = std::make_unique<TensorBoardWriter>(options_.tensorboard_dir);
}

// A run that ends by an exception still leaves the cursor on a fresh line for the error (unless a
// line written since, an error's, already ended the bar's).
RunReporter::~RunReporter() {
  if (!bar_.empty() && progress_line_is_open()) out_ << '\n' << std::flush;
  set_progress_line_open(false);
}

void RunReporter::header(const std::string& text) { print_line(text); }

void RunReporter::note(const std::string& text) { print_line(text); }

void RunReporter::erase_bar() {
  if (!bar_.empty()) out_ << '\r' << std::string(bar_.size(), ' ') << '\r';
}

// Each of these leaves the bar drawn at the cursor: the logger (host/log.h) then starts its next
// line on a fresh one rather than at the bar's end.
void RunReporter::print_line(const std::string& text) {
  erase_bar();
  out_ << text << '\n' << bar_ << std::flush;
  set_progress_line_open(!bar_.empty());
}

void RunReporter::draw_bar(const std::string& bar) {
  out_ << '\r' << bar;
  if (bar.size() < bar_.size()) out_ << std::string(bar_.size() - bar.size(), ' ');
  out_ << std::flush;
  bar_ = bar;
  set_progress_line_open(!bar_.empty());
}

void RunReporter::step(const StepReport& r) {
  ProgressLine line;
  line.step = r.step;
  line.total_steps = r.total_steps;
  line.loss = r.loss;
  line.lr = r.lr;
  line.grad_norm = r.grad_norm;
  line.tokens_per_s = r.tokens_per_s;
  line.mfu = r.mfu;
  line.elapsed_s = r.elapsed_s;
  line.eta_s = r.eta_s;
  if (r.val_loss) line.val_loss = *r.val_loss;
  if (r.offload_GBps) std::tie(line.offload_read_GBps, line.offload_write_GBps) = *r.offload_GBps;
  if (options_.progress_bar) {
    if (r.val_loss) {
      char text[96];
      std::snprintf(text, sizeof text, "step %lld/%lld | val_loss %.4f", static_cast<long long>(r.step),
                    static_cast<long long>(r.total_steps), *r.val_loss);
      erase_bar();
      out_ << text << '\n';
      bar_.clear();  // the line is empty now: the new bar needs no padding
    }
    draw_bar(format_progress_bar(line, options_.columns));
  } else {
    out_ << format_progress(line) << std::endl;
  }

  nlohmann::json record = {{"step", r.step},         {"loss", r.loss},     {"lr", r.lr},
                           {"grad_norm", r.grad_norm}, {"tokens_per_s", r.tokens_per_s}, {"mfu", r.mfu},
                           {"step_ms", r.step_ms},   {"elapsed_s", r.elapsed_s}, {"memory_bytes", r.memory_bytes}};
  for (const auto& [phase, ms] : r.phase_ms) record["time_ms"][phase] = ms;
  if (r.val_loss) record["val_loss"] = *r.val_loss;
  if (r.skipped) record["skipped"] = true;
  for (auto it = r.extra.begin(); it != r.extra.end(); ++it) record[it.key()] = it.value();
  metrics_.write(record);
  if (tensorboard_) write_tensorboard(r);
}

void RunReporter::write_tensorboard(const StepReport& r) {
  TensorBoardWriter& tb = *tensorboard_;
  tb.scalar(r.step, "train/loss", r.loss);
  tb.scalar(r.step, "train/lr", r.lr);
  tb.scalar(r.step, "train/grad_norm", r.grad_norm);
  tb.scalar(r.step, "perf/tokens_per_s", r.tokens_per_s);
  tb.scalar(r.step, "perf/mfu", r.mfu);
  tb.scalar(r.step, "memory/resident_bytes", double(r.memory_bytes));
  for (const auto& [phase, ms] : r.phase_ms) tb.scalar(r.step, "time/" + phase + "_ms", ms);
  if (r.val_loss) tb.scalar(r.step, "val/loss", *r.val_loss);
  if (const auto model = r.extra.find("model"); model != r.extra.end())  // the model's own (model.h step_metrics)
    for (const auto& [name, value] : model->items()) tb.scalar(r.step, "model/" + name, value.get<double>());
  tb.flush();
}

void RunReporter::finish() {
  if (!bar_.empty() && progress_line_is_open()) out_ << '\n';
  set_progress_line_open(false);
  bar_.clear();
  out_.flush();
  if (tensorboard_) tensorboard_->flush();
}

std::string RunReporter::tensorboard_path() const { return tensorboard_ ? tensorboard_->path() : ""; }

int64_t resident_memory_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size_pages = 0, resident_pages = 0;
  if (!(statm >> size_pages >> resident_pages)) return 0;
  return resident_pages * int64_t(sysconf(_SC_PAGESIZE));
}

}  // namespace keel
