// Progress lines for people: step, loss, learning rate, gradient norm, tokens/s, MFU, elapsed
// time and ETA, in one fixed-width line per logged step.
#pragma once

#include <cstdint>
#include <string>

namespace keel {

struct ProgressLine {
  int64_t step = 0, total_steps = 0;
  double loss = 0, lr = 0, grad_norm = 0, tokens_per_s = 0, mfu = 0;
  double elapsed_s = 0, eta_s = 0;
  double val_loss = -1;  // < 0: not evaluated at this step
};

std::string format_progress(const ProgressLine& line);
std::string format_duration(double seconds);  // h:mm:ss

}  // namespace keel
