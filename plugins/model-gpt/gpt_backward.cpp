// The gpt model's backward pass, the forward's layers in reverse (llm.c's gpt2_backward), and its
// split for zero-bubble schedules: an INPUT part that computes only what the chunk below waits for
// (the activation gradients) and a WEIGHT part, run later, that computes the weight gradients from
// the output gradients the INPUT part kept. The WEIGHT part accumulates the same products in the
// same order as the full backward, so the split changes no bit of any gradient.
#include "gpt_model.hpp"

#include <cstddef>

namespace keel_gpt {

using keel_support::Carver;
using keel_support::StatusError;

void GptModel::backward(const keel_backward_args& args) {
  const keel_support::BackwardCall call = keel_support::read_backward_call(args, plan_);
  const int32_t chunk = call.chunk;
  if (call.part == KEEL_BACKWARD_WEIGHT) return weight_backward(args, chunk);
  const bool first = call.first, last = call.last;
  const float* output_grad = call.output_grad;
  float* input_grad = call.input_grad;
  const int32_t part = call.part;
  const ActivationKey key{args.microbatch, chunk};
  Activations* found = activations_.find(key);
  if (!found || !found->backward_pending)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "backward: micro-batch " + std::to_string(args.microbatch) +
                                                     (plan_.chunks() > 1 ? ", chunk " + std::to_string(chunk) : "") +
                                                     " has no forward with targets awaiting its backward");
  Activations& a = *found;
  a.backward_pending = false;
  const int64_t N = static_cast<int64_t>(a.B) * a.T, io_numel = stage_io_numel(a.B, a.T);
  ensure_grad_scratch(N);
  SavedOutputGrads* save = part == KEEL_BACKWARD_INPUT ? &saved_output_grads(a) : nullptr;

  // scratch_.dresidual: the gradient of the residual stream, from the chunk's output down.
  if (last) head_backward(a, args.access, args.loss_scale, save);
  else ops_.copy(scratch_.dresidual, ops_.at(output_grad), io_numel);
  for (int64_t l = a.blocks - 1; l >= 0; --l) block_backward(a, l, args.access, save);
  if (!first) ops_.copy(ops_.at(input_grad), scratch_.dresidual, io_numel);
  if (save) {  // the embedding has weights only: its backward is all WEIGHT part
    if (first) ops_.copy(save->encoded, scratch_.dresidual, io_numel);
    a.weight_pending = true;
    return;
  }
  if (first) embedding_backward(a, args.access, scratch_.dresidual);
  activations_.recycle(key);
}

// The WEIGHT part of a split backward: every weight gradient from the output gradients its INPUT
// part saved, in the full backward's order, so each gradient buffer sums the same numbers in the
// same order as it would without the split.
void GptModel::weight_backward(const keel_backward_args& args, int32_t chunk) {
  const ActivationKey key{args.microbatch, chunk};
  Activations* found = activations_.find(key);
  if (!found || !found->weight_pending)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "backward: micro-batch " + std::to_string(args.microbatch) +
                                                     ", chunk " + std::to_string(chunk) +
                                                     ": KEEL_BACKWARD_WEIGHT without its KEEL_BACKWARD_INPUT part");
  Activations& a = *found;
  a.weight_pending = false;
  ensure_grad_scratch(static_cast<int64_t>(a.B) * a.T);
  if (chunk == plan_.last_chunk()) head_weight_backward(a, args.access);
  for (int64_t l = a.blocks - 1; l >= 0; --l) block_weight_backward(a, l, args.access);
  if (chunk == 0) embedding_backward(a, args.access, a.saved.encoded);
  activations_.recycle(key);
}

SavedOutputGrads& GptModel::saved_output_grads(Activations& a) {
  SavedOutputGrads& s = a.saved;
  if (s.memory.get()) return s;
  const int64_t L = a.blocks, C = config_.d_model, Cl = share_.channels, F = share_.hidden;
  const int64_t N = static_cast<int64_t>(a.B) * a.T, Nr = norm_rows(N), head = a.head ? 1 : 0;
  auto carve_all = [&](char* base) {
    Carver carve(base);
    auto elems = [&](int64_t n) { return ops_.at(carve.take<char>(int64_t(ops_.bytes(n)))); };
    s.fcproj = elems(L * N * C);
    s.fch = elems(L * N * F);
    s.ln2 = elems(L * Nr * C);
    s.attproj = elems(L * N * C);
    s.qkv = elems(L * N * 3 * Cl);
    s.ln1 = elems(L * Nr * C);
    s.logits = elems(head * N * share_.vocab.rows);
    s.lnf = elems(head * Nr * C);
    s.encoded = elems(a.chunk == 0 ? Nr * C : 0);
    return carve.used();
  };
  const size_t bytes = carve_all(nullptr);
  s.memory = backend_.alloc_bytes(bytes);
  carve_all(static_cast<char*>(s.memory.get()));
  return s;
}

void GptModel::head_backward(Activations& a, const keel_param_access* access, float loss_scale,
                             SavedOutputGrads* save) {
  GradScratch& g = scratch_;
  const int64_t C = config_.d_model, N = static_cast<int64_t>(a.B) * a.T, Nr = norm_rows(N);
  const int64_t Vl = share_.vocab.rows;
  const float dloss = a.valid_targets ? loss_scale / static_cast<float>(a.valid_targets) : 0.0f;
  const int32_t phase = save ? KEEL_PHASE_FORWARD : KEEL_PHASE_BACKWARD;  // INPUT part: weights only

  ops_.fill_zero(g.dln, N * C);
  ops_.fill_zero(g.dresidual, Nr * C);
  // The logits are dead after this: their gradient overwrites them in place (the ABI's in-place
  // classifier, llm.c's), which reads and writes the largest tensor of the step once instead of
  // zeroing, reading and adding into a second one.
  const Elems dlogits = a.logits;
  ops_.crossentropy_backward(dlogits, a.logits, a.lse, a.targets, dloss, N, share_.vocab.begin, share_.vocab.valid,
                             Vl);  // (B,T,Vp/tp)
  if (save) ops_.copy(save->logits, dlogits, N * Vl);
  {  // layer 0, first use: the lm_head. Not final where the embedding backward still adds to dwte;
     // final on a later pipeline stage, whose wte copy serves the lm_head only.
    LayerLease lease(access, 0, phase, layer_specs(0), layer_size(0));
    float* dwte = save ? nullptr : lease.grad(WTE);
    ops_.matmul_backward(g.dln, dwte, nullptr, dlogits, a.lnf, lease.param_elems(WTE), N, C, Vl);
    lease.release(!save && plan_.holds_wte_copy());
  }
  const Elems last_residual = a.residual3 + (a.blocks - 1) * Nr * C;
  {  // layer L+1: final layernorm; dresidual becomes the gradient of the last block's output
    const int32_t layer = config_.n_layer + 1;
    LayerLease lease(access, layer, phase, layer_specs(layer), layer_size(layer));
    const Elems dlnf = tp_.enter_backward(g.dln, scratch_.dln_rows, N);
    if (save) ops_.copy(save->lnf, dlnf, Nr * C);
    norm_backward(g.dresidual, save ? nullptr : lease.grad(LNF_W), save ? nullptr : lease.grad(LNF_B), dlnf,
                  last_residual, lease.param_elems(LNF_W), a.lnf_mean, a.lnf_rstd, N);
    lease.release(!save);
  }
}

void GptModel::head_weight_backward(Activations& a, const keel_param_access* access) {
  const int64_t C = config_.d_model, N = static_cast<int64_t>(a.B) * a.T, Nr = norm_rows(N);
  {  // the lm_head's wte, as in head_backward
    LayerLease lease(access, 0, KEEL_PHASE_BACKWARD, layer_specs(0), layer_size(0));
    if (lease.grad(WTE))  // NULL: frozen (a LoRA run's base)
      ops_.matmul_backward(Elems(), lease.grad(WTE), nullptr, a.saved.logits, a.lnf, lease.param_elems(WTE), N, C,
                           share_.vocab.rows);
    lease.release(plan_.holds_wte_copy());
  }
  const int32_t layer = config_.n_layer + 1;
  LayerLease lease(access, layer, KEEL_PHASE_BACKWARD, layer_specs(layer), layer_size(layer));
  if (lease.grad(LNF_W))
    norm_weight_backward(lease.grad(LNF_W), lease.grad(LNF_B), a.saved.lnf, a.residual3 + (a.blocks - 1) * Nr * C,
                         lease.param_elems(LNF_W), a.lnf_mean, a.lnf_rstd, N);
  lease.release(true);
}

void GptModel::block_backward(Activations& a, int64_t l, const keel_param_access* access, SavedOutputGrads* save) {
  GradScratch& g = scratch_;
  const int64_t C = config_.d_model, B = a.B, T = a.T, N = B * T, Nr = norm_rows(N);
  const int64_t Cl = share_.channels, F = share_.hidden;
  const int32_t layer = static_cast<int32_t>(1 + plan_.first_block(a.chunk) + l);
  LayerLease lease(access, layer, save ? KEEL_PHASE_FORWARD : KEEL_PHASE_BACKWARD, layer_specs(layer),
                   layer_size(layer));
  prepare_weights(lease, a.dropout_seed);
  const LayerLease* grads = save ? nullptr : &lease;  // INPUT part: no weight gradients
  auto w = [&](int i) { return weight(lease, BlockTensor(i)); };
  auto dw = [&](int i) { return weight_grad(grads, BlockTensor(i)); };
  // A split backward's INPUT part keeps each output gradient for the WEIGHT part.
  auto keep = [&](Elems to, Elems from, int64_t n) { ops_.copy(to, from, n); };
  const Elems residual = l == 0 ? a.encoded : a.residual3 + (l - 1) * Nr * C;  // (Nr,C)
  const BlockActivations v = block_activations(a, l);
  recompute_block(v, residual, lease, B, T, /*for_input=*/true);
  const Elems ln1 = v.ln1, atty = v.atty, residual2 = v.residual2, ln2 = v.ln2;
  const Elems fch = v.fch, fch_gelu = v.fch_gelu;
  const float *ln1_mean = v.ln1_mean, *ln1_rstd = v.ln1_rstd, *ln2_mean = v.ln2_mean, *ln2_rstd = v.ln2_rstd;

  // MLP branch: residual3 = residual2 + proj(gelu(fc(ln2(residual2)))). dresidual holds
  // ∂/∂residual3, which is also the gradient of the projection's output. The replicated
  // projection bias gets its gradient from every row, so it is whole on every rank.
  const Elems dfcproj_out = tp_.leave_backward(g.dresidual, scratch_.dgathered, N);  // (B,T,C)
  if (save) keep(save->fcproj + l * N * C, dfcproj_out, N * C);
  ops_.fill_zero(g.dfch_gelu, N * F);
  ops_.fill_zero(g.dfch, N * F);
  ops_.fill_zero(g.dln, N * C);
  // LoRA's dropout: each input's adapters add their share of its gradient (and, with weight
  // gradients, form theirs) from the same mask as the forward's.
  using keel_support::kAttentionInput, keel_support::kAttentionOutput, keel_support::kMlpInput, keel_support::kMlpHidden;
  const int64_t piece = tp_.active() ? tp_.rank() : 0;
  ops_.matmul_backward(g.dfch_gelu, dw(FCPROJ_W), dw(FCPROJ_B), dfcproj_out, fch_gelu, w(FCPROJ_W), N, F, C);
  lora_.dropped_backward(g.dfch_gelu, grads, dfcproj_out, fch_gelu, N, F, {{FCPROJ_W, C}}, input_seed(v, kMlpHidden),
                         piece * F);
  ops_.gelu_backward(g.dfch, fch, g.dfch_gelu, N * F);
  if (save) keep(save->fch + l * N * F, g.dfch, N * F);
  ops_.matmul_backward(g.dln, dw(FC_W), dw(FC_B), g.dfch, ln2, w(FC_W), N, C, F);
  lora_.dropped_backward(g.dln, grads, g.dfch, ln2, N, C, {{FC_W, F}}, input_seed(v, kMlpInput), 0);
  // adds ln2's path to the skip path already in dresidual: now ∂/∂residual2
  const Elems dln2 = tp_.enter_backward(g.dln, scratch_.dln_rows, N);
  if (save) keep(save->ln2 + l * Nr * C, dln2, Nr * C);
  norm_backward(g.dresidual, dw(LN2_W), dw(LN2_B), dln2, residual2, w(LN2_W), ln2_mean, ln2_rstd, N);

  // Attention branch: residual2 = residual + proj(attention(qkv(ln1(residual)))).
  const Elems dproj_out = tp_.leave_backward(g.dresidual, scratch_.dgathered, N);  // (B,T,C)
  if (save) keep(save->attproj + l * N * C, dproj_out, N * C);
  ops_.fill_zero(g.datty, N * Cl);
  ops_.fill_zero(g.dqkv, N * 3 * Cl);
  ops_.fill_zero(g.dln, N * C);
  ops_.matmul_backward(g.datty, dw(ATTPROJ_W), dw(ATTPROJ_B), dproj_out, grads ? proj_input(atty, N) : atty,
                       w(ATTPROJ_W), N, Cl, C);
  lora_.dropped_backward(g.datty, grads, dproj_out, atty, N, Cl, {{ATTPROJ_W, C}}, input_seed(v, kAttentionOutput),
                         piece * Cl);
  attend_backward(v, g.dqkv, g.datty, B, T);
  if (save) keep(save->qkv + l * N * 3 * Cl, g.dqkv, N * 3 * Cl);
  ops_.matmul_backward(g.dln, dw(QKV_W), dw(QKV_B), g.dqkv, ln1, w(QKV_W), N, C, 3 * Cl);
  lora_.dropped_backward(g.dln, grads, g.dqkv, ln1, N, C, {{QKV_W, 3 * Cl}}, input_seed(v, kAttentionInput), 0);
  const Elems dln1 = tp_.enter_backward(g.dln, scratch_.dln_rows, N);
  if (save) keep(save->ln1 + l * Nr * C, dln1, Nr * C);
  norm_backward(g.dresidual, dw(LN1_W), dw(LN1_B), dln1, residual, w(LN1_W), ln1_mean, ln1_rstd, N);
  if (lora_.active() && grads) lora_.fold(lease);
  lease.release(!save);
}

void GptModel::block_weight_backward(Activations& a, int64_t l, const keel_param_access* access) {
  const SavedOutputGrads& d = a.saved;
  const int64_t C = config_.d_model, N = static_cast<int64_t>(a.B) * a.T, Nr = norm_rows(N);
  const int64_t Cl = share_.channels, F = share_.hidden;
  const int32_t layer = static_cast<int32_t>(1 + plan_.first_block(a.chunk) + l);
  LayerLease lease(access, layer, KEEL_PHASE_BACKWARD, layer_specs(layer), layer_size(layer));
  prepare_weights(lease, a.dropout_seed);
  auto w = [&](int i) { return weight(lease, BlockTensor(i)); };
  auto dw = [&](int i) { return weight_grad(&lease, BlockTensor(i)); };
  const Elems residual = l == 0 ? a.encoded : a.residual3 + (l - 1) * Nr * C;  // (Nr,C)
  const BlockActivations v = block_activations(a, l);
  recompute_block(v, residual, lease, a.B, a.T, /*for_input=*/false);  // FULL: again, the INPUT part's is gone
  // A frozen tensor (a LoRA run's base) has no gradient to form.
  auto linear = [&](int weight, int bias, Elems dout, Elems inp, int64_t in, int64_t out) {
    if (dw(weight) || dw(bias)) ops_.matmul_backward(Elems(), dw(weight), dw(bias), dout, inp, w(weight), N, in, out);
  };
  auto norm = [&](int weight, int bias, Elems dout, Elems inp, const float* mean, const float* rstd) {
    if (dw(weight)) norm_weight_backward(dw(weight), dw(bias), dout, inp, w(weight), mean, rstd, N);
  };
  // LoRA's dropout: the adapters' gradients from each input's dropped copy (Elems(): no input gradient).
  const int64_t piece = tp_.active() ? tp_.rank() : 0;
  auto dropped = [&](int weight, Elems dout, Elems inp, int64_t in, int64_t out, keel_support::LoraInput input,
                     int64_t col_offset) {
    lora_.dropped_backward(Elems(), true, dout, inp, N, in, {{size_t(weight), out}}, input_seed(v, input), col_offset);
  };
  linear(FCPROJ_W, FCPROJ_B, d.fcproj + l * N * C, v.fch_gelu, F, C);
  dropped(FCPROJ_W, d.fcproj + l * N * C, v.fch_gelu, F, C, keel_support::kMlpHidden, piece * F);
  linear(FC_W, FC_B, d.fch + l * N * F, v.ln2, C, F);
  dropped(FC_W, d.fch + l * N * F, v.ln2, C, F, keel_support::kMlpInput, 0);
  norm(LN2_W, LN2_B, d.ln2 + l * Nr * C, v.residual2, v.ln2_mean, v.ln2_rstd);
  linear(ATTPROJ_W, ATTPROJ_B, d.attproj + l * N * C, proj_input(v.atty, N), Cl, C);
  dropped(ATTPROJ_W, d.attproj + l * N * C, v.atty, Cl, C, keel_support::kAttentionOutput, piece * Cl);
  linear(QKV_W, QKV_B, d.qkv + l * N * 3 * Cl, v.ln1, C, 3 * Cl);
  dropped(QKV_W, d.qkv + l * N * 3 * Cl, v.ln1, C, 3 * Cl, keel_support::kAttentionInput, 0);
  norm(LN1_W, LN1_B, d.ln1 + l * Nr * C, residual, v.ln1_mean, v.ln1_rstd);
  if (lora_.active()) lora_.fold(lease);
  lease.release(true);
}

void GptModel::embedding_backward(Activations& a, const keel_param_access* access, Elems dencoded_rows) {
  const int64_t C = config_.d_model, B = a.B, T = a.T, N = B * T;
  // layer 0, last use: the embeddings. Now wte's gradient is complete.
  LayerLease lease(access, 0, KEEL_PHASE_BACKWARD, layer_specs(0), layer_size(0));
  if (lease.grad(WTE)) {  // NULL: frozen (a LoRA run's base), nothing to scatter
    if (a.packed) {  // wte's rows by token, wpe's by position (every rank the same whole dwpe)
      const Elems dencoded = tp_.active() ? tp_.leave_backward(dencoded_rows, scratch_.dgathered, N) : dencoded_rows;
      ops_.embedding_rows_backward(lease.grad(WTE), nullptr, dencoded, a.tokens, B, T, C, share_.vocab.begin,
                                   share_.vocab.rows);
      ops_.embedding_rows_backward(lease.grad(WPE), nullptr, dencoded, a.positions, B, T, C, 0, config_.max_seq_len);
    } else if (!tp_.active()) {
      ops_.embedding_backward(lease.grad(WTE), lease.grad(WPE), dencoded_rows, a.tokens, B, T, C);
    } else {  // every rank sees every row's gradient: its wte rows, and the same whole dwpe
      const Elems dencoded = tp_.leave_backward(dencoded_rows, scratch_.dgathered, N);
      ops_.embedding_rows_backward(lease.grad(WTE), lease.grad(WPE), dencoded, a.tokens, B, T, C, share_.vocab.begin,
                                   share_.vocab.rows);
    }
  }
  lease.release(true);
}

}  // namespace keel_gpt
