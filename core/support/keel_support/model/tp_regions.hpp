// The tensor-parallel seams of a Megatron-style decoder (the gpt and llama models; installed for
// third-party ones): the two region boundaries every block crosses twice (into a column-parallel
// matmul, out of a row-parallel one) in the plain and the sequence-parallel form, the gradient of
// a replicated norm weight, and the vocabulary-parallel cross-entropy and logits. At tp 1 each is
// what a whole model does (no copies, no communication). The mappings themselves are
// tp_mappings.hpp; this file only decides which one a seam is.
#pragma once

#include <keel/model.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "keel_support/common/abi_guard.hpp"
#include "keel_support/common/backend_buffer.hpp"
#include "keel_support/common/backend_ops.hpp"
#include "keel_support/model/compute_ops.hpp"
#include "keel_support/common/json_parse.hpp"
#include "keel_support/model/tp_mappings.hpp"

namespace keel_support {

// This rank's columns of the (padded) vocabulary: rows of the embedding and the output head.
struct VocabShard {
  int64_t rows = 0;   // Vp/tp
  int64_t begin = 0;  // the first of them
  int64_t valid = 0;  // how many of them are real words (the rest padding)
};

class TpRegions {
 public:
  TpRegions() = default;

  // Reads the tensor-parallel create fields; throws StatusError naming what is wrong. `width` is
  // the model's d_model: the residual stream's row width. The model checks its shapes against
  // size() next, then connect()s.
  TpRegions(const keel_model_create_args& args, const ComputeOps& ops, int64_t width) : width_(width) {
    const int32_t P = args.tp_size, rank = args.tp_rank;
    if (P < 1 || rank < 0 || rank >= P)
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: tp_rank " + std::to_string(rank) +
                                                       " is not in [0, tp_size " + std::to_string(P) + ")");
    sequence_parallel_ = args.sequence_parallel != 0;
    group_ = TpGroup{nullptr, nullptr, P, rank, ops};
    if (P == 1) {
      if (sequence_parallel_)
        throw StatusError(KEEL_ERR_INVALID_CONFIG, "parallel.sequence_parallel needs parallel.tp > 1 (found tp 1)");
    }
  }

  // Checks the tp communicator against the create fields and the backend for the ops a
  // vocabulary-parallel embedding needs; nothing at tp 1. `who` names the model in messages
  // ("the llama model").
  void connect(const keel_model_create_args& args, const char* who) {
    const int32_t P = group_.size, rank = group_.rank;
    if (P == 1) return;
    if (!args.tp_comm || !args.tp_comm_obj)
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: tp_size " + std::to_string(P) +
                                                       " needs the tp communicator (tp_comm and tp_comm_obj are NULL)");
    group_.api = args.tp_comm;
    group_.obj = args.tp_comm_obj;
    int32_t comm_size = 0, comm_rank = -1;
    check_callee(group_.api->size(group_.obj, &comm_size), "tp comm size");
    check_callee(group_.api->rank(group_.obj, &comm_rank), "tp comm rank");
    if (comm_size != P || comm_rank != rank)
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: the tp communicator is rank " + std::to_string(comm_rank) +
                                                       " of " + std::to_string(comm_size) + ", but tp_rank " +
                                                       std::to_string(rank) + " of tp_size " + std::to_string(P) +
                                                       " was given");
    const bool has_forward = KEEL_HAS_SLOT(args.backend, embedding_rows_forward);
    if (!has_forward || !KEEL_HAS_SLOT(args.backend, embedding_rows_backward))
      throw StatusError(KEEL_ERR_UNIMPLEMENTED, std::string("the backend does not implement embedding_rows_") +
                                                    (has_forward ? "backward" : "forward") + " (ABI 0.6), which " +
                                                    who + " needs at parallel.tp = " + std::to_string(P));
  }

  const TpGroup& group() const { return group_; }
  int32_t size() const { return group_.size; }
  int32_t rank() const { return group_.rank; }
  bool active() const { return group_.active(); }
  bool sequence_parallel() const { return sequence_parallel_; }
  // Rows of the norm and residual regions this rank holds: all of them, or 1/tp under sequence parallelism.
  int64_t norm_rows(int64_t rows) const { return sequence_parallel_ ? rows / group_.size : rows; }
  // This rank's share of a padded vocabulary of Vp words, V of them real.
  VocabShard vocab_shard(int64_t Vp, int64_t V) const {
    VocabShard s{Vp / group_.size, Vp / group_.size * group_.rank, 0};
    s.valid = std::clamp<int64_t>(V - s.begin, 0, s.rows);
    return s;
  }

  // Into the column-parallel region: a norm's output on this rank's rows becomes every row, on
  // every rank (an all-gather under sequence parallelism, else the identity).
  void enter(Elems ln_rows, Elems full, int64_t rows) const {
    if (sequence_parallel_) GatherFromSequenceRegion::forward(group_, ln_rows.get(), full.get(), norm_rows(rows) * width_);
    else CopyToTpRegion::forward(group_, ln_rows.get(), full.get(), rows * width_);
  }
  // Out of the row-parallel region: partial sums over all rows become this rank's rows, summed.
  void leave(Elems partial, Elems out_rows, int64_t rows) const {
    if (sequence_parallel_) ScatterToSequenceRegion::forward(group_, partial.get(), out_rows.get(), rows * width_);
    else ReduceFromTpRegion::forward(group_, partial.get(), out_rows.get(), rows * width_);
  }
  // Backward of enter: dfull (all rows, partial sums) becomes the gradient of this rank's rows,
  // in `drows` under sequence parallelism (returned), else in place (dfull returned).
  Elems enter_backward(Elems dfull, Elems drows, int64_t rows) const {
    if (sequence_parallel_) {
      GatherFromSequenceRegion::backward(group_, dfull.get(), drows.get(), rows * width_);
      return drows;
    }
    CopyToTpRegion::backward(group_, dfull.get(), dfull.get(), rows * width_);
    return dfull;
  }
  // Backward of leave: the gradient of this rank's rows becomes that of every row, gathered into
  // `dgathered` under sequence parallelism (returned), else drows itself.
  Elems leave_backward(Elems drows, Elems dgathered, int64_t rows) const {
    if (!sequence_parallel_) return drows;  // ReduceFromTpRegion::backward is the identity
    ScatterToSequenceRegion::backward(group_, drows.get(), dgathered.get(), norm_rows(rows) * width_);
    return dgathered;
  }
  // A replicated norm weight is copied into every rank's rows under sequence parallelism: its
  // gradient is the sum of the ranks' parts, taken in fp32 (a tp group of the compute type would
  // round it). Without sequence parallelism every rank saw every row: nothing to do.
  void sum_replicated_grad(float* part, int64_t n, const char* what) const {
    if (sequence_parallel_) sum_partial_grad(part, n, what);
  }
  // A replicated tensor whose gradient each rank forms from its own piece of another (a LoRA
  // factor beside a split weight): the sum over the tp group, with or without sequence
  // parallelism, in fp32.
  void sum_partial_grad(float* part, int64_t n, const char* what) const {
    if (!active()) return;
    check_callee(group_.api->all_reduce(group_.obj, part, part, size_t(n), keel_dtype{KEEL_DTYPE_FLOAT, 32, 1},
                                        KEEL_REDUCE_SUM, nullptr),
                 (std::string("tp all_reduce of ") + what).c_str());
  }

  // Cross-entropy without probabilities (Megatron's vocabulary-parallel form, the whole
  // vocabulary one shard at tp 1): each rank's statistics of its columns into ce_stats (rows·3,
  // then tp·rows·3 gathered at tp > 1), combined per row into lse (kept for the backward) and
  // the loss, added × weight into loss_sum.
  void vocab_parallel_loss(const ComputeOps& ops, float* ce_stats, Elems logits, float* lse, const int32_t* targets,
                           int64_t rows, const VocabShard& shard, float* loss_sum, float weight) const {
    ops.crossentropy_stats(ce_stats, logits, targets, rows, shard.begin, shard.valid, shard.rows);
    float* all = ce_stats;
    if (active()) {
      all = ce_stats + 3 * rows;
      check_callee(group_.api->all_gather(group_.obj, ce_stats, all, size_t(3 * rows),
                                          keel_dtype{KEEL_DTYPE_FLOAT, 32, 1}, nullptr),
                   "tp all_gather of the cross-entropy statistics");
    }
    // Per row: M = max m_r, S = Σ s_r·e^(m_r−M), lse = M + log S, and the loss lse − the target's
    // logit (which exactly one rank reports; the others report 0).
    ops.crossentropy_combine(lse, loss_sum, all, group_.size, targets, rows, weight);
  }
  // Floats of ce_stats vocab_parallel_loss needs for `rows` rows.
  int64_t ce_stats_floats(int64_t rows) const { return 3 * rows * (active() ? 1 + group_.size : 1); }

 private:
  TpGroup group_;
  bool sequence_parallel_ = false;
  int64_t width_ = 0;
};

// Inference logits as model.h hands them out: whole (rows, Vp) rows, fp32 whatever the compute
// type. At tp > 1 the vocabulary shards are gathered; the buffer is kept for the next call.
class InferenceLogits {
 public:
  const float* get(const BackendOps& backend, const TpRegions& tp, Elems shard_logits, int64_t rows, int64_t Vp) {
    const ComputeOps& ops = tp.group().ops;
    const bool fp32 = is_fp32(ops.dtype());
    if (!tp.active() && fp32) return shard_logits.as_fp32();
    // One buffer: the gathered compute-type logits (2·rows·Vp elements) then their fp32 copy.
    if (rows_ < rows) {
      buffer_ = BackendBuffer();
      buffer_ = backend.alloc_bytes(ops.bytes(2 * rows * Vp) + size_t(rows * Vp) * sizeof(float));
      rows_ = rows;
    }
    const Elems whole = tp.active() ? gather(tp, shard_logits, rows, Vp) : shard_logits;
    if (fp32) return whole.as_fp32();
    auto* out = reinterpret_cast<float*>(static_cast<char*>(buffer_.get()) + ops.bytes(2 * rows * Vp));
    ops.to_fp32(out, whole, rows * Vp);
    return out;
  }

 private:
  // Gathered rank-major (P, rows, cols) into the upper half, then laid out row-major (rows, Vp).
  Elems gather(const TpRegions& tp, Elems shard_logits, int64_t rows, int64_t Vp) {
    const ComputeOps& ops = tp.group().ops;
    const int64_t P = tp.size(), cols = Vp / P;
    const Elems out = ops.at(buffer_.get());
    const Elems gathered = out + rows * Vp;
    check_callee(tp.group().api->all_gather(tp.group().obj, shard_logits.get(), gathered.get(), size_t(rows * cols),
                                            ops.dtype(), nullptr),
                 "tp all_gather of the logits");
    for (int64_t r = 0; r < P; ++r)
      for (int64_t row = 0; row < rows; ++row) ops.copy(out + row * Vp + r * cols, gathered + (r * rows + row) * cols, cols);
    return out;
  }

  BackendBuffer buffer_;
  int64_t rows_ = 0;
};

}  // namespace keel_support
