// The gpt model's tensor-parallel seams: the checks at create, the two region boundaries every
// block crosses twice (into the column-parallel matmul, out of the row-parallel one) in the
// plain and the sequence-parallel form, the layernorm gradients of replicated parameters, and
// the vocabulary-parallel cross-entropy and logits. At tp 1 each of these is what the model
// did before (no copies, no communication).
#include <keel_support/sized_output.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

#include "gpt_model.hpp"

namespace keel_gpt {

using keel_support::StatusError;

namespace {

void refuse(keel_status code, const std::string& what) { throw StatusError(code, what); }

}  // namespace

void GptModel::check_tensor_parallel(const keel_model_create_args& args) {
  const int32_t P = args.tp_size, rank = args.tp_rank;
  if (P < 1 || rank < 0 || rank >= P)
    refuse(KEEL_ERR_INVALID_ARGUMENT, "create: tp_rank " + std::to_string(rank) + " is not in [0, tp_size " +
                                          std::to_string(P) + ")");
  sequence_parallel_ = args.sequence_parallel != 0;
  tp_ = TpGroup{nullptr, nullptr, P, rank, ops_};
  const int64_t NH = config_.n_head, C = config_.d_model, Vp = config_.padded_vocab_size;
  share_ = TpShape{NH / P, C / P, 4 * C / P, Vp / P, Vp / P * rank, 0};
  share_.vocab_valid = std::clamp<int64_t>(config_.vocab_size - share_.vocab_begin, 0, share_.vocab_rows);
  if (P == 1) {
    if (sequence_parallel_)
      refuse(KEEL_ERR_INVALID_CONFIG, "parallel.sequence_parallel needs parallel.tp > 1 (found tp 1)");
    return;
  }
  const std::string at = " at parallel.tp = " + std::to_string(P);
  if (NH % P != 0)
    refuse(KEEL_ERR_INVALID_CONFIG, "model.n_head (" + std::to_string(NH) + ") must be a multiple of the tensor-"
                                    "parallel size" + at + ": each rank holds n_head/tp whole heads");
  if (4 * C % P != 0)
    refuse(KEEL_ERR_INVALID_CONFIG, "the MLP width 4·model.d_model (" + std::to_string(4 * C) +
                                        ") must be a multiple of the tensor-parallel size" + at);
  if (Vp % P != 0)
    refuse(KEEL_ERR_INVALID_CONFIG, "the padded vocabulary (" + std::to_string(Vp) + ", model.vocab_size " +
                                        std::to_string(config_.vocab_size) + " rounded up to a multiple of 128) "
                                        "must be a multiple of the tensor-parallel size" + at);
  if (sequence_parallel_ && config_.max_seq_len % P != 0)
    refuse(KEEL_ERR_INVALID_CONFIG, "model.seq_len (" + std::to_string(config_.max_seq_len) +
                                        ") must be a multiple of the tensor-parallel size with "
                                        "parallel.sequence_parallel" + at + ": each rank holds seq_len/tp of it");
  if (!args.tp_comm || !args.tp_comm_obj)
    refuse(KEEL_ERR_INVALID_ARGUMENT, "create: tp_size " + std::to_string(P) + " needs the tp communicator "
                                      "(tp_comm and tp_comm_obj are NULL)");
  tp_.api = args.tp_comm;
  tp_.obj = args.tp_comm_obj;
  int32_t comm_size = 0, comm_rank = -1;
  keel_support::check_callee(tp_.api->size(tp_.obj, &comm_size), "tp comm size");
  keel_support::check_callee(tp_.api->rank(tp_.obj, &comm_rank), "tp comm rank");
  if (comm_size != P || comm_rank != rank)
    refuse(KEEL_ERR_INVALID_ARGUMENT, "create: the tp communicator is rank " + std::to_string(comm_rank) + " of " +
                                          std::to_string(comm_size) + ", but tp_rank " + std::to_string(rank) +
                                          " of tp_size " + std::to_string(P) + " was given");
#define KEEL_REQUIRE_TP_OP(op, abi)                                                                          \
  if (!KEEL_HAS_SLOT(args.backend, op))                                                                      \
    refuse(KEEL_ERR_UNIMPLEMENTED, "the backend does not implement " #op " (ABI " abi "), which the gpt model " \
                                   "needs" + at);
  KEEL_REQUIRE_TP_OP(embedding_rows_forward, "0.6") KEEL_REQUIRE_TP_OP(embedding_rows_backward, "0.6")
#undef KEEL_REQUIRE_TP_OP
}

void GptModel::enter_tp_region(Elems ln_rows, Elems full, int64_t rows) const {
  const int64_t C = config_.d_model;
  if (sequence_parallel_) GatherFromSequenceRegion::forward(tp_, ln_rows.get(), full.get(), norm_rows(rows) * C);
  else CopyToTpRegion::forward(tp_, ln_rows.get(), full.get(), rows * C);
}

void GptModel::leave_tp_region(Elems partial, Elems out_rows, int64_t rows) const {
  const int64_t C = config_.d_model;
  if (sequence_parallel_) ScatterToSequenceRegion::forward(tp_, partial.get(), out_rows.get(), rows * C);
  else ReduceFromTpRegion::forward(tp_, partial.get(), out_rows.get(), rows * C);
}

Elems GptModel::enter_tp_region_backward(Elems dfull, int64_t rows) {
  const int64_t C = config_.d_model;
  if (sequence_parallel_) {
    GatherFromSequenceRegion::backward(tp_, dfull.get(), scratch_.dln_rows.get(), rows * C);
    return scratch_.dln_rows;
  }
  CopyToTpRegion::backward(tp_, dfull.get(), dfull.get(), rows * C);
  return dfull;
}

Elems GptModel::leave_tp_region_backward(Elems drows, int64_t rows) {
  const int64_t C = config_.d_model;
  if (sequence_parallel_) {
    ScatterToSequenceRegion::backward(tp_, drows.get(), scratch_.dgathered.get(), norm_rows(rows) * C);
    return scratch_.dgathered;
  }
  return drows;  // ReduceFromTpRegion::backward is the identity
}

void GptModel::norm_backward(Elems dinp, float* dweight, float* dbias, Elems dout, Elems inp, Elems weight,
                             const float* mean, const float* rstd, int64_t rows) {
  const keel_support::BackendOps& be = backend_;
  const int64_t C = config_.d_model;
  if (!dweight) {  // the op always writes a weight gradient: into scratch, discarded
    KEEL_OP(be, fill_zero, scratch_.dnorm, 2 * C * sizeof(float));
    ops_.layernorm_backward(dinp, scratch_.dnorm, scratch_.dnorm + C, dout, inp, weight, mean, rstd, norm_rows(rows),
                            C);
    return;
  }
  if (!sequence_parallel_) {  // every rank holds every row: its gradients are already whole
    ops_.layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, norm_rows(rows), C);
    return;
  }
  float* part = scratch_.dnorm;  // weight then bias, fp32 like every weight gradient
  KEEL_OP(be, fill_zero, part, 2 * C * sizeof(float));
  ops_.layernorm_backward(dinp, part, part + C, dout, inp, weight, mean, rstd, norm_rows(rows), C);
  // The norm's parameters are copied into every rank's rows: their gradient is the sum over tp,
  // in fp32 (a tp group of the compute type would round it).
  keel_support::check_callee(tp_.api->all_reduce(tp_.obj, part, part, size_t(2 * C), keel_dtype{KEEL_DTYPE_FLOAT, 32, 1},
                                                 KEEL_REDUCE_SUM, nullptr),
                             "tp all_reduce of the layernorm's weight gradients");
  KEEL_OP(be, accumulate, dweight, part, C);
  KEEL_OP(be, accumulate, dbias, part + C, C);
}

void GptModel::norm_weight_backward(float* dweight, float* dbias, Elems dout, Elems inp, Elems weight,
                                    const float* mean, const float* rstd, int64_t rows) {
  // The op always writes an input gradient too: into the scratch dln, which nothing reads now.
  norm_backward(scratch_.dln, dweight, dbias, dout, inp, weight, mean, rstd, rows);
}

// Cross-entropy without probabilities (Megatron's vocabulary-parallel form, the whole vocabulary
// one shard at tp 1): each rank's statistics of its columns, gathered, combined per row on the
// backend into lse (kept for the backward) and the loss, added × weight into loss_sum.
void GptModel::vocab_parallel_loss(Activations& a, int64_t rows, float* loss_sum, float weight) {
  float* mine = a.ce_stats;
  ops_.crossentropy_stats(mine, a.logits, a.targets, rows, share_.vocab_begin, share_.vocab_valid, share_.vocab_rows);
  float* all = mine;
  if (tp_.active()) {
    all = a.ce_stats + 3 * rows;  // (tp, rows, 3)
    keel_support::check_callee(tp_.api->all_gather(tp_.obj, mine, all, size_t(3 * rows),
                                                   keel_dtype{KEEL_DTYPE_FLOAT, 32, 1}, nullptr),
                               "tp all_gather of the cross-entropy statistics");
  }
  // Per row: M = max m_r, S = Σ s_r·e^(m_r−M), lse = M + log S, and the loss lse − the target's
  // logit (which exactly one rank reports; the others report 0).
  ops_.crossentropy_combine(a.lse, loss_sum, all, tp_.size, a.targets, rows, weight);
}

Elems GptModel::gather_logits(const Activations& a, int64_t rows) {
  const int64_t Vp = config_.padded_vocab_size, cols = share_.vocab_rows, P = tp_.size;
  // Gathered rank-major (P, rows, cols) into the upper half, then laid out row-major (rows, Vp).
  const Elems out = ops_.at(full_logits_.get());
  const Elems gathered = out + rows * Vp;
  keel_support::check_callee(tp_.api->all_gather(tp_.obj, a.logits.get(), gathered.get(), size_t(rows * cols),
                                                 ops_.dtype(), nullptr),
                             "tp all_gather of the logits");
  for (int64_t r = 0; r < P; ++r)
    for (int64_t row = 0; row < rows; ++row) ops_.copy(out + row * Vp + r * cols, gathered + (r * rows + row) * cols, cols);
  return out;
}

const float* GptModel::inference_logits(const Activations& a, int64_t rows) {
  const int64_t Vp = config_.padded_vocab_size;
  const bool fp32 = keel_support::is_fp32(ops_.dtype());
  if (!tp_.active() && fp32) return a.logits.as_fp32();
  // One buffer: the gathered compute-type logits (2·rows·Vp elements) then their fp32 copy.
  if (full_logits_rows_ < rows) {
    full_logits_ = BackendBuffer();
    full_logits_ = backend_.alloc_bytes(ops_.bytes(2 * rows * Vp) + size_t(rows * Vp) * sizeof(float));
    full_logits_rows_ = rows;
  }
  const Elems whole = tp_.active() ? gather_logits(a, rows) : a.logits;
  if (fp32) return whole.as_fp32();
  auto* out = reinterpret_cast<float*>(static_cast<char*>(full_logits_.get()) + ops_.bytes(2 * rows * Vp));
  ops_.to_fp32(out, whole, rows * Vp);
  return out;
}

}  // namespace keel_gpt
