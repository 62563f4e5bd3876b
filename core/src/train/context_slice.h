// Context parallelism's split of a batch (docs/parallelism.md §6a): rank r of a cp block keeps
// chunks r and 2·cp−1−r of the 2·cp equal chunks of every sequence, so under the causal mask
// every rank does the same attention work, and hands the model 2·B rows of T/(2·cp) tokens,
// chunk-major (its first chunk of every sequence, then its second), with the tokens' true
// positions (model.h keel_model_create_args.cp_size).
#pragma once

#include <cstdint>

#include "data/token_source.h"

namespace keel {

// This rank's rows of `batch`; the batch itself at cp 1. Throws KeelError naming the numbers
// when T does not divide into 2·cp chunks, or the batch is packed (several documents a row).
Batch context_slice(const Batch& batch, int32_t cp_rank, int32_t cp);

}  // namespace keel
