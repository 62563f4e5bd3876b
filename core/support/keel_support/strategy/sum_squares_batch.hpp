// Σ x² over many runs of backend memory with one read-back: the gradient norm a strategy counts
// at every step stays in backend memory until the host needs it (backend.h, 0.8 ordering).
// Each run's sum lands in its own fp32 slot (sum_squares_dt into a backend array), and total()
// brings the slots to the host with one copy and adds them in double, in the order the runs
// were added, so the sum does not depend on how fast the backend ran them. A backend without
// sum_squares_dt (before 0.8) is read run by run through the 0.1 sum_squares, which waits.
#pragma once

#include <cstdint>
#include <vector>

#include "keel_support/common/backend_buffer.hpp"
#include "keel_support/common/backend_ops.hpp"

namespace keel_support {

class SumSquaresBatch {
 public:
  explicit SumSquaresBatch(BackendOps backend)
      : backend_(backend), on_backend_(KEEL_HAS_SLOT(backend.api, sum_squares_dt)) {}

  // Queues Σ x[i]² over n fp32 elements of backend memory. x must stay alive and unchanged until
  // total() (or until the next synchronous copy into it, which the ordering rule puts after this).
  void add(const float* x, int64_t n) {
    if (n <= 0) return;
    if (!on_backend_) {
      host_sum_ += backend_.sum_squares(x, n);
      return;
    }
    if (used_in_block_ == kSlotsPerBlock || blocks_.empty()) {
      blocks_.push_back(backend_.alloc_floats(kSlotsPerBlock));  // zero-filled: each slot starts at 0
      used_in_block_ = 0;
    }
    float* slot = blocks_.back().floats() + used_in_block_++;
    KEEL_OP(backend_, sum_squares_dt, keel_dtype{KEEL_DTYPE_FLOAT, 32, 1}, x, n, slot);
  }

  // The sum of everything added; the one point where the host waits for the backend.
  double total() const {
    double sum = host_sum_;
    std::vector<float> slots(kSlotsPerBlock);
    for (size_t b = 0; b < blocks_.size(); ++b) {
      const int64_t used = b + 1 == blocks_.size() ? used_in_block_ : kSlotsPerBlock;
      backend_.copy(slots.data(), blocks_[b].floats(), used, KEEL_COPY_DEVICE_TO_HOST);
      for (int64_t i = 0; i < used; ++i) sum += double(slots[size_t(i)]);
    }
    return sum;
  }

 private:
  static constexpr int64_t kSlotsPerBlock = 256;  // one block (one copy back) covers most models

  BackendOps backend_;
  bool on_backend_;
  std::vector<BackendBuffer> blocks_;
  int64_t used_in_block_ = 0;
  double host_sum_ = 0.0;
};

}  // namespace keel_support
