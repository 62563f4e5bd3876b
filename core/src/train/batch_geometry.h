// The batch arithmetic of a run, in one place for `keel validate` and a run's start-up alike:
// data.global_batch sequences per optimizer step, data.micro_batch per data-parallel rank per
// micro-step, seq_len tokens each. Every product of config numbers is formed in 64 bits and
// bounded before anything divides by it or sizes a buffer with it (int32 products once wrapped:
// micro_batch 2^20 × dp 4096 became 0 and killed `keel validate` with SIGFPE).
#pragma once

#include <cstdint>

#include "config/run_config.h"

namespace keel {

// The most tokens one micro-batch may hold: its token and target arrays are int32 on the host
// and the backend, and no model could hold the activations of more.
inline constexpr int64_t kMaxTokensPerMicroBatch = INT32_MAX;

// The most micro-batches one optimizer step may take per data-parallel rank: a step's batches
// and its pipeline action lists are held whole, so past this a typo in data.global_batch would
// grow memory without bound before the first step.
inline constexpr int64_t kMaxMicroStepsPerStep = 65536;

struct BatchGeometry {
  int32_t seq_len = 0;      // tokens per sequence: data.seq_len, else the model's maximum
  int32_t micro_steps = 0;  // micro-batches per optimizer step on each data-parallel rank
};

// Checks the batch of `config` on `dp_size` data replicas (data-parallel ranks, less context
// parallelism's: a cp block reads one replica's samples) of `tp_size` for a model whose
// longest sequence is `model_max_seq_len`; throws KeelError(KEEL_ERR_INVALID_CONFIG) naming the
// file, the JSON paths, the numbers and the bound.
BatchGeometry check_batch_geometry(const RunConfig& config, int64_t dp_size, int32_t tp_size, int32_t model_max_seq_len);

}  // namespace keel
