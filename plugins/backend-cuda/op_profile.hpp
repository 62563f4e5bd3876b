// The cuda backend's per-op timing ("op_profile": true in its config section): each slot's calls
// and GPU time, measured with a pair of CUDA events recorded on the backend's stream around the
// work the slot enqueues, and logged as one table when the backend is destroyed. Slots are named
// by their C function (matmul_forward_dt, ...), so the table reads against backend.h. Slots that
// count their arithmetic (the products, attention) also show TFLOP/s and the share of the peak.
// Events are read back in batches, once many are pending and at the end, so timing adds no
// synchronisation to the step beyond those reads; off, it costs each op a test of a null pointer.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace keel_cuda {

class OpProfile {
 public:
  explicit OpProfile(cudaStream_t stream) : stream_(stream) {}
  ~OpProfile();
  OpProfile(const OpProfile&) = delete;
  OpProfile& operator=(const OpProfile&) = delete;

  // Around one slot call: `begin` before it enqueues work, then `end` after it with the FLOPs it
  // counts, or `cancel` when it threw. Calls on several threads each hold their own Timing.
  struct Timing {
    const char* op;
    cudaEvent_t start;
  };
  Timing begin(const char* op);
  void end(const Timing& timing, double flops);
  void cancel(const Timing& timing);

  // The table, a header line then one line per op, longest first, and a total line:
  //   op, calls, GPU ms, share of the total, TFLOP, TFLOP/s, % of `peak_flops`.
  std::vector<std::string> table(double peak_flops);

 private:
  struct Pending {
    const char* op;
    cudaEvent_t start, stop;
    double flops;
  };
  struct Row {
    int64_t calls = 0;
    double ms = 0.0, flops = 0.0;
  };
  cudaEvent_t take_event();
  void drain();  // reads back every pending pair (waits for the last), under mutex_

  cudaStream_t stream_;
  std::mutex mutex_;
  std::vector<Pending> pending_;
  std::vector<cudaEvent_t> spare_;
  std::map<std::string, Row> rows_;
};

}  // namespace keel_cuda
