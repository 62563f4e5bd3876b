// The gpt model's tensor- and context-parallel checks at create (what its shapes need of tp; what
// cp does not combine with yet) and the layernorm gradients of replicated parameters; the seams themselves are keel_support/model/tp_regions.hpp. At
// tp 1 each of these is what the whole model does (no copies, no communication).
#include <keel_support/common/sized_output.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <string>

#include "gpt_model.hpp"

namespace keel_gpt {

using keel_support::StatusError;

namespace {

void refuse(keel_status code, const std::string& what) { throw StatusError(code, what); }

}  // namespace

void GptModel::check_tensor_parallel(const keel_model_create_args& args) {
  tp_ = TpRegions(args, ops_, config_.d_model);
  const int64_t P = tp_.size(), NH = config_.n_head, C = config_.d_model, Vp = config_.padded_vocab_size;
  share_ = TpShape{NH / P, C / P, 4 * C / P, tp_.vocab_shard(Vp, config_.vocab_size)};
  if (P == 1) return;
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
  if (tp_.sequence_parallel() && config_.max_seq_len % P != 0)
    refuse(KEEL_ERR_INVALID_CONFIG, "model.seq_len (" + std::to_string(config_.max_seq_len) +
                                        ") must be a multiple of the tensor-parallel size with "
                                        "parallel.sequence_parallel" + at + ": each rank holds seq_len/tp of it");
  tp_.connect(args, "the gpt model");
}

// Context parallelism's first cut: one stage, no tensor parallelism, no adapter dropout (its
// masks are drawn by row, and a rank's rows are chunks of the sequences).
void GptModel::connect_context_parallel(const keel_model_create_args& args) {
  const keel_support::ContextGroup cp = keel_support::context_group(args);
  if (cp.size <= 1) return;
  const std::string at = "parallel.cp " + std::to_string(cp.size);
  if (config_.lora.dropout > 0)
    refuse(KEEL_ERR_INVALID_CONFIG, at + ": model.lora.dropout draws its masks by row, which a rank's chunks of the "
                                         "sequences do not keep; set it to 0 or run at parallel.cp 1");
#define KEEL_REQUIRE_OP(op) KEEL_REQUIRE_BACKEND_OP(args.backend, op, "the gpt model under context parallelism");
  KEEL_REQUIRE_OP(attention_block_forward) KEEL_REQUIRE_OP(attention_block_backward)
  KEEL_REQUIRE_OP(attention_merge_dt) KEEL_REQUIRE_OP(embedding_rows_forward_dt)
#undef KEEL_REQUIRE_OP
  ring_ = keel_support::RingAttention(ops_, cp.comm, cp.obj, cp.rank, cp.size,
                                     cp.all_gather ? keel_support::KvExchange::all_gather : keel_support::KvExchange::ring);
  cp_size_ = cp.size;
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
  if (!tp_.sequence_parallel()) {  // every rank holds every row: its gradients are already whole
    ops_.layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, norm_rows(rows), C);
    return;
  }
  float* part = scratch_.dnorm;  // weight then bias, fp32 like every weight gradient
  KEEL_OP(be, fill_zero, part, 2 * C * sizeof(float));
  ops_.layernorm_backward(dinp, part, part + C, dout, inp, weight, mean, rstd, norm_rows(rows), C);
  tp_.sum_replicated_grad(part, 2 * C, "the layernorm's weight gradients");
  KEEL_OP(be, accumulate, dweight, part, C);
  KEEL_OP(be, accumulate, dbias, part + C, C);
}

void GptModel::norm_weight_backward(float* dweight, float* dbias, Elems dout, Elems inp, Elems weight,
                                    const float* mean, const float* rstd, int64_t rows) {
  // The op always writes an input gradient too: into the scratch dln, which nothing reads now.
  norm_backward(scratch_.dln, dweight, dbias, dout, inp, weight, mean, rstd, rows);
}

}  // namespace keel_gpt
