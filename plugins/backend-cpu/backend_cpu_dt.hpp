// The cpu backend's way to run an fp32 kernel at an element type (ABI 0.8 *_dt ops): at fp32 the
// caller's pointers go to the kernel; at bf16 the operands are widened to fp32 scratch (exact),
// the kernel runs, and the results are rounded back once. Shared by the files of *_dt ops.
#pragma once

#include <keel/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "backend_cpu.hpp"  // defines: StatusError, is_fp32, is_bf16, dtype_name
#include "cpu/bf16.h"       // defines: bf16, widen_bf16, round_to_bf16

namespace keel_backend_cpu {

// True at bf16, false at fp32; any other type is refused naming the op.
inline bool bf16_storage(keel_dtype dt, const char* op) {
  if (is_fp32(dt)) return false;
  if (is_bf16(dt)) return true;
  throw StatusError(KEEL_ERR_UNIMPLEMENTED, std::string(op) + ": the cpu backend runs fp32 and bf16, not " +
                                                dtype_name(dt));
}

// An operand the op reads, at fp32: the caller's memory at fp32, a widened copy at bf16. NULL
// (an absent bias, wpe) stays NULL.
class Fp32Input {
 public:
  Fp32Input(bool widen, const void* data, int64_t n) : ptr_(static_cast<const float*>(data)) {
    if (!widen || !data) return;
    scratch_.reset(new float[n]);
    keel::cpu::widen_bf16(scratch_.get(), static_cast<const keel::cpu::bf16*>(data), n);
    ptr_ = scratch_.get();
  }
  const float* get() const { return ptr_; }

 private:
  std::unique_ptr<float[]> scratch_;
  const float* ptr_;
};

// An operand the op writes, at fp32: the caller's memory at fp32; at bf16 fp32 scratch that
// store() rounds into the caller's memory. kAccumulate (a backward's +=, scale's *=) widens
// the caller's values into the scratch first. NULL (an output not wanted) stays NULL.
enum Access { kWrite, kAccumulate };
class Fp32Output {
 public:
  Fp32Output(bool round, void* data, int64_t n, Access access) : ptr_(static_cast<float*>(data)), dst_(data), n_(n) {
    if (!round || !data) return;
    scratch_.reset(new float[n]);
    if (access == kAccumulate) keel::cpu::widen_bf16(scratch_.get(), static_cast<const keel::cpu::bf16*>(data), n);
    ptr_ = scratch_.get();
  }
  float* get() const { return ptr_; }
  void store() const {
    if (scratch_) keel::cpu::round_to_bf16(static_cast<keel::cpu::bf16*>(dst_), scratch_.get(), n_);
  }

 private:
  std::unique_ptr<float[]> scratch_;
  float* ptr_;
  void* dst_;
  int64_t n_;
};

}  // namespace keel_backend_cpu
