// A pipelined model's forward and backward arguments (model.h), read as far as the caller's struct
// has them (a core before 0.7 runs the whole model) and checked against the pipeline cut: which
// chunk, whether it embeds the tokens or computes the loss, the activations it takes and hands
// on, the micro-batch shape. Shared by the gpt and llama models; installed for third-party ones.
#pragma once

#include <keel/model.h>

#include <cstddef>
#include <string>

#include "keel_support/common/abi_guard.hpp"
#include "keel_support/model/chunk_plan.hpp"

namespace keel_support {

struct ForwardCall {
  int32_t chunk = 0;
  const float* input = nullptr;  // the previous chunk's output (later chunks)
  float* output = nullptr;       // this chunk's output (all but the last chunk)
  bool first = true, last = true;
  int32_t B = 0, T = 0;
  bool device_loss = false;      // the caller keeps the loss in backend memory (0.8 loss_sum)
  const int32_t* positions = nullptr;  // (B,T) a packed batch's positions (0.19); nullptr: one sequence per row
  uint64_t dropout_seed = 0;           // the micro-batch's dropout masks' seed (0.19); 0: no dropout
};

// `seq_divisor`: T must be a multiple of it (the tp size under sequence parallelism, else 1).
inline ForwardCall read_forward_call(const keel_forward_args& args, const ChunkPlan& plan, int32_t max_seq_len,
                                     int32_t seq_divisor) {
  if (args.struct_size < offsetof(keel_forward_args, chunk))
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "forward: args->struct_size is smaller than keel_forward_args");
  ForwardCall c;
  if (args.struct_size >= offsetof(keel_forward_args, output) + sizeof(args.output)) {
    c.chunk = args.chunk;
    c.input = args.input;
    c.output = args.output;
  }
  plan.require_mine(c.chunk, "forward");
  c.first = c.chunk == 0;
  c.last = c.chunk == plan.last_chunk();
  if (!args.access || args.access->struct_size < sizeof(keel_param_access) || (c.first && !args.tokens))
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "forward: access table and tokens are required");
  if ((!c.first && !c.input) || (!c.last && !c.output))
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "forward: chunk " + std::to_string(c.chunk) + " of " +
                                                     std::to_string(plan.chunks()) + " needs " +
                                                     (!c.first && !c.input ? "the previous chunk's output as input"
                                                                           : "an output buffer for the next chunk"));
  c.B = args.batch, c.T = args.seq_len;
  if (c.B < 1 || c.T < 1 || c.T > max_seq_len)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "forward: need batch >= 1 and 1 <= seq_len <= " +
                                                     std::to_string(max_seq_len) + ", found batch " +
                                                     std::to_string(c.B) + ", seq_len " + std::to_string(c.T));
  if (c.T % seq_divisor != 0)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "forward: seq_len " + std::to_string(c.T) + " is not a multiple of "
                                                 "the tensor-parallel size " + std::to_string(seq_divisor) +
                                                 ", which sequence parallelism splits it by");
  c.device_loss = args.struct_size >= offsetof(keel_forward_args, loss_weight) + sizeof(float) &&
                  args.loss_sum != nullptr;
  if (args.struct_size >= offsetof(keel_forward_args, positions) + sizeof(args.positions)) c.positions = args.positions;
  if (args.struct_size >= offsetof(keel_forward_args, dropout_seed) + sizeof(args.dropout_seed) && args.targets)
    c.dropout_seed = args.dropout_seed;
  return c;
}

struct BackwardCall {
  int32_t chunk = 0;
  int32_t part = KEEL_BACKWARD_FULL;
  const float* output_grad = nullptr;  // the gradient of this chunk's output (all but the last chunk)
  float* input_grad = nullptr;         // the gradient of its input, for the chunk before (later chunks)
  bool first = true, last = true;
};

inline BackwardCall read_backward_call(const keel_backward_args& args, const ChunkPlan& plan) {
  if (args.struct_size < offsetof(keel_backward_args, chunk))
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "backward: args->struct_size is smaller than keel_backward_args");
  if (!args.access || args.access->struct_size < sizeof(keel_param_access))
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "backward: an access table is required");
  BackwardCall c;
  if (args.struct_size >= offsetof(keel_backward_args, part) + sizeof(args.part)) {
    c.chunk = args.chunk;
    c.output_grad = args.output_grad;
    c.input_grad = args.input_grad;
    c.part = args.part;
  }
  plan.require_mine(c.chunk, "backward");
  if (c.part != KEEL_BACKWARD_FULL && c.part != KEEL_BACKWARD_INPUT && c.part != KEEL_BACKWARD_WEIGHT)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "backward: part " + std::to_string(c.part) + " is none of "
                                                 "KEEL_BACKWARD_FULL (0), _INPUT (1), _WEIGHT (2)");
  c.first = c.chunk == 0;
  c.last = c.chunk == plan.last_chunk();
  if (c.part == KEEL_BACKWARD_WEIGHT) return c;  // reads only what its INPUT part kept
  if ((!c.last && !c.output_grad) || (!c.first && !c.input_grad))
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "backward: chunk " + std::to_string(c.chunk) + " of " +
                                                     std::to_string(plan.chunks()) + " needs " +
                                                     (!c.last && !c.output_grad ? "the gradient of its output"
                                                                                : "an input_grad buffer"));
  return c;
}

}  // namespace keel_support
