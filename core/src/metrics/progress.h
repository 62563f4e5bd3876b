// Progress for people: step, loss, learning rate, gradient norm, tokens/s, MFU, elapsed time
// and ETA (and the offload tier's read/write rates when there is one), as one fixed-width line per logged step (logs, pipes) or as one bar a terminal
// redraws in place.
#pragma once

#include <cstdint>
#include <string>

namespace keel {

struct ProgressLine {
  int64_t step = 0, total_steps = 0;
  double loss = 0, lr = 0, grad_norm = 0, tokens_per_s = 0, mfu = 0;
  double elapsed_s = 0, eta_s = 0;
  double val_loss = -1;  // < 0: not evaluated at this step
  double offload_read_GBps = -1, offload_write_GBps = -1;  // < 0: no offload tier
};

std::string format_progress(const ProgressLine& line);
std::string format_duration(double seconds);  // h:mm:ss
// `[#######.....] 42% step 420/1000 loss 2.310 | 8.1k tok/s | MFU 27% | ETA 0:01:10`, at most
// `columns` wide: the bar takes what the text leaves, between 10 and 30 cells.
std::string format_progress_bar(const ProgressLine& line, int columns = 100);
std::string format_count(double value);  // 950, 8.1k, 12.3M: three significant figures at most

}  // namespace keel
