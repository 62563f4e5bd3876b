// The cpu backend's per-op timing ("op_profile": true in its config section): every slot's calls
// and wall time, with the work the slot counts (the FLOPs of its products, the bytes it streams),
// logged as one table when the backend is destroyed. Slots are named by their C function
// (matmul_forward_dt, ...), so the table reads against backend.h. Off, it costs each op a test of
// a null pointer and each count_work call a test of a thread-local one.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace keel_backend_cpu {

// Called by a slot while it runs: the arithmetic (FLOPs) and memory traffic (bytes read plus
// bytes written, each once) of this call. Ops that count nothing show time alone.
void count_work(double flops, double bytes);

class OpProfile {
 public:
  // The table, a header line then one line per op, slowest first, and a total line:
  //   op, calls, total ms, GFLOP, GB, GFLOP/s, % of `peak_flops`, GB/s.
  std::vector<std::string> table(double peak_flops) const;

  // Times one slot call on this thread: construct before the op, destroy after.
  class Scope {
   public:
    Scope(OpProfile* profile, const char* op);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

    // What count_work adds to, on this thread, while this scope is the innermost.
    struct Counted {
      double flops = 0.0, bytes = 0.0;
    };

   private:
    OpProfile* profile_;
    const char* op_;
    std::chrono::steady_clock::time_point start_;
    Counted counted_;
    Counted* outer_;
  };

 private:
  struct Row {
    int64_t calls = 0;
    double seconds = 0.0, flops = 0.0, bytes = 0.0;
  };
  void record(const char* op, double seconds, double flops, double bytes);

  mutable std::mutex mutex_;  // a backend's slots may be called from more than one thread
  std::map<std::string, Row> rows_;
};

}  // namespace keel_backend_cpu
