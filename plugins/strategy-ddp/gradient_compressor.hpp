// What ddp's compressing variants (topk, powersgd) change: how the data-parallel mean of the
// gradients is formed. Plain ddp all-reduces every bucket whole while the backward runs; a
// compressor instead sends a smaller message built from this rank's gradients plus what earlier
// steps left unsent (error feedback), after the backward, on the training thread, and leaves the
// same averaged gradients on every rank, so the norm, the clip and the optimizer step stay ddp's.
// Its error-feedback memory is per-rank state the checkpoint keeps (strategy.h own state).
#pragma once

#include <keel/comm.h>

#include <keel_support/strategy/param_store.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "gradient_buckets.hpp"

namespace keel_ddp {

// The element type of what the compressors send: fp32 values.
constexpr keel_dtype kFloat32 = {KEEL_DTYPE_FLOAT, 32, 1};

// The data-parallel group as the compressors use it: synchronous calls on the training thread.
struct DataParallelGroup {
  const keel_comm_api* comm = nullptr;
  void* comm_obj = nullptr;
  int32_t size = 1;

  void all_reduce_sum(void* data, size_t count, keel_dtype dtype) const;
  void all_gather(const void* send, void* recv, size_t count, keel_dtype dtype) const;
};

// A named per-rank array the compressor keeps across steps (own state "<name>").
struct CompressorArray {
  std::string name;
  std::vector<float>* values;
};

class GradientCompressor {
 public:
  virtual ~GradientCompressor() = default;
  // On entry store.grads() holds this rank's gradients; on return it holds the same data-parallel
  // mean of the compressed gradients on every rank (non-finite on every rank when any rank's
  // input was, so the core skips or stops the step). What the compressor keeps across steps is
  // only staged here: a skipped step must leave it as it was.
  virtual void reduce_mean(const keel_support::ParamStore& store, const GradientBuckets& buckets,
                           const DataParallelGroup& group) = 0;
  // The step was taken: the staged memory becomes the kept one.
  virtual void commit() = 0;
  // The kept arrays (checkpoints read and write them between steps).
  virtual std::vector<CompressorArray> own_arrays() = 0;
  // A line for the start-up log: what is sent instead of the gradients.
  virtual std::string describe(const keel_support::ParamStore& store) const = 0;
};

}  // namespace keel_ddp
