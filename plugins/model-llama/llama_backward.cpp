// The llama model's backward pass, the forward's layers in reverse, and its split for
// zero-bubble schedules: an INPUT part computing the activation gradients the chunk below waits
// for, keeping each matmul's output gradient, and a WEIGHT part computing the weight gradients
// from them later, in the full backward's order, so the split changes no bit of any gradient.
#include <cstddef>

#include "llama_model.hpp"

namespace keel_llama {

using keel_support::Carver;
using keel_support::StatusError;

void LlamaModel::backward(const keel_backward_args& args) {
  const keel_support::BackwardCall call = keel_support::read_backward_call(args, plan_);
  const int32_t chunk = call.chunk;
  if (call.part == KEEL_BACKWARD_WEIGHT) return weight_backward(args, chunk);
  const bool first = call.first, last = call.last;
  const ActivationKey key{args.microbatch, chunk};
  Activations* found = activations_.find(key);
  if (!found || !found->backward_pending)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "backward: micro-batch " + std::to_string(args.microbatch) +
                                                     (plan_.chunks() > 1 ? ", chunk " + std::to_string(chunk) : "") +
                                                     " has no forward with targets awaiting its backward");
  Activations& a = *found;
  a.backward_pending = false;
  const int64_t N = int64_t(a.B) * a.T, io_numel = stage_io_numel(a.B, a.T);
  ensure_scratch(N);
  SavedOutputGrads* save = call.part == KEEL_BACKWARD_INPUT ? &saved_output_grads(a) : nullptr;

  if (sparse_) sparse_->begin_backward(a.moe, plan_.first_block(chunk), a.blocks, N, args.loss_scale);
  if (last) head_backward(a, args.access, args.loss_scale, save);
  else ops_.copy(scratch_.dresidual, ops_.at(call.output_grad), io_numel);
  for (int64_t l = a.blocks - 1; l >= 0; --l) block_backward(a, l, args.access, save);
  if (!first) ops_.copy(ops_.at(call.input_grad), scratch_.dresidual, io_numel);
  if (save) {  // the embedding has weights only: its backward is all WEIGHT part
    if (first) ops_.copy(save->encoded, scratch_.dresidual, io_numel);
    a.weight_pending = true;
    return;
  }
  if (first) embedding_backward(a, args.access, scratch_.dresidual);
  activations_.recycle(key);
}

void LlamaModel::weight_backward(const keel_backward_args& args, int32_t chunk) {
  const ActivationKey key{args.microbatch, chunk};
  Activations* found = activations_.find(key);
  if (!found || !found->weight_pending)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "backward: micro-batch " + std::to_string(args.microbatch) +
                                                     ", chunk " + std::to_string(chunk) +
                                                     ": KEEL_BACKWARD_WEIGHT without its KEEL_BACKWARD_INPUT part");
  Activations& a = *found;
  a.weight_pending = false;
  ensure_scratch(int64_t(a.B) * a.T);
  if (chunk == plan_.last_chunk()) head_weight_backward(a, args.access);
  for (int64_t l = a.blocks - 1; l >= 0; --l) block_weight_backward(a, l, args.access);
  if (chunk == 0) embedding_backward(a, args.access, a.saved.encoded);
  activations_.recycle(key);
}

SavedOutputGrads& LlamaModel::saved_output_grads(Activations& a) {
  SavedOutputGrads& s = a.saved;
  if (s.memory.get()) return s;
  const int64_t L = a.blocks, C = config_.d_model, F = share_.hidden;
  const int64_t N = int64_t(a.B) * a.T, Nr = tp_.norm_rows(N), head = a.head ? 1 : 0;
  auto carve_all = [&](char* base) {
    Carver carve(base);
    auto elems = [&](int64_t n) { return ops_.at(carve.take<char>(int64_t(ops_.bytes(n)))); };
    s.down = elems(L * N * C);
    s.gate_up = elems(L * N * 2 * F);
    s.ln2 = elems(L * Nr * C);
    s.o = elems(L * N * C);
    s.qkv = elems(L * N * share_.qkv_width);
    s.ln1 = elems(L * Nr * C);
    s.logits = elems(head * N * share_.vocab.rows);
    s.lnf = elems(head * Nr * C);
    s.encoded = elems(a.chunk == 0 ? Nr * C : 0);
    return carve.used();
  };
  s.memory = backend_.alloc_bytes(carve_all(nullptr));
  carve_all(static_cast<char*>(s.memory.get()));
  return s;
}

void LlamaModel::stacked_backward(StackedLinear& stacked, Elems dinp, Elems dout, Elems inp, int64_t N,
                                  const LayerLease* grads, std::initializer_list<StackedPart> parts) {
  std::vector<float*> dweights, dbiases;  // both empty: the input gradient only
  for (const StackedPart& part : parts) {
    if (!grads) break;
    dweights.push_back(weight_grad(grads, part.weight));
    if (stacked.with_bias()) dbiases.push_back(bias_grad(grads, part.bias));
  }
  stacked.backward(dinp, dout, inp, N, dweights, dbiases);
}

void LlamaModel::norm_backward(Elems dinp, float* dweight, Elems dout, Elems inp, Elems weight, const float* rstd,
                               int64_t rows) {
  const keel_support::BackendOps& be = backend_;
  const int64_t C = config_.d_model;
  if (dweight && !tp_.sequence_parallel()) {  // every rank holds every row: the gradient is whole
    ops_.rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, tp_.norm_rows(rows), C);
    return;
  }
  // The op always writes a weight gradient: into scratch, then summed over tp (or discarded).
  float* part = scratch_.dnorm;
  KEEL_OP(be, fill_zero, part, size_t(C) * sizeof(float));
  ops_.rmsnorm_backward(dinp, part, dout, inp, weight, rstd, tp_.norm_rows(rows), C);
  if (!dweight) return;
  tp_.sum_replicated_grad(part, C, "the RMSNorm weight gradients");
  KEEL_OP(be, accumulate, dweight, part, C);
}

void LlamaModel::head_backward(Activations& a, const keel_param_access* access, float loss_scale,
                               SavedOutputGrads* save) {
  Scratch& g = scratch_;
  const int64_t C = config_.d_model, N = int64_t(a.B) * a.T, Nr = tp_.norm_rows(N), Vl = share_.vocab.rows;
  const float dloss = a.valid_targets ? loss_scale / static_cast<float>(a.valid_targets) : 0.0f;
  const int32_t phase = save ? KEEL_PHASE_FORWARD : KEEL_PHASE_BACKWARD;  // INPUT part: weights only
  ops_.fill_zero(g.dln, N * C);
  ops_.fill_zero(g.dresidual, Nr * C);
  // The logits are dead after this: their gradient overwrites them in place (the ABI's in-place
  // classifier, llm.c's), which reads and writes the largest tensor of the step once instead of
  // zeroing, reading and adding into a second one.
  const Elems dlogits = a.logits;
  ops_.crossentropy_backward(dlogits, a.logits, a.lse, a.targets, dloss, N, share_.vocab.begin, share_.vocab.valid,
                             Vl);
  if (save) ops_.copy(save->logits, dlogits, N * Vl);
  const Elems last_residual = a.residual3 + (a.blocks - 1) * Nr * C;
  const int32_t final_layer = config_.n_layer + 1;
  if (tied()) {  // layer 0, first use: not final where the embedding backward still adds to it
    LayerLease lease(access, 0, phase, layer_specs(0), layer_size(0));
    ops_.matmul_backward(g.dln, save ? nullptr : lease.grad(EMBED), nullptr, dlogits, a.lnf,
                         lease.param_elems(EMBED), N, C, Vl);
    lease.release(!save && plan_.holds_wte_copy());
  }
  LayerLease lease(access, final_layer, phase, layer_specs(final_layer), layer_size(final_layer));
  if (!tied())
    ops_.matmul_backward(g.dln, save ? nullptr : lease.grad(LM_HEAD), nullptr, dlogits, a.lnf,
                         lease.param_elems(LM_HEAD), N, C, Vl);
  const Elems dlnf = tp_.enter_backward(g.dln, g.dln_rows, N);
  if (save) ops_.copy(save->lnf, dlnf, Nr * C);
  norm_backward(g.dresidual, save ? nullptr : lease.grad(FINAL_NORM), dlnf, last_residual,
                lease.param_elems(FINAL_NORM), a.lnf_rstd, N);
  lease.release(!save);
}

void LlamaModel::head_weight_backward(Activations& a, const keel_param_access* access) {
  const int64_t C = config_.d_model, N = int64_t(a.B) * a.T, Nr = tp_.norm_rows(N), Vl = share_.vocab.rows;
  if (tied()) {
    LayerLease lease(access, 0, KEEL_PHASE_BACKWARD, layer_specs(0), layer_size(0));
    if (lease.grad(EMBED))  // NULL: frozen
      ops_.matmul_backward(Elems(), lease.grad(EMBED), nullptr, a.saved.logits, a.lnf, lease.param_elems(EMBED), N, C,
                           Vl);
    lease.release(plan_.holds_wte_copy());
  }
  const int32_t layer = config_.n_layer + 1;
  LayerLease lease(access, layer, KEEL_PHASE_BACKWARD, layer_specs(layer), layer_size(layer));
  if (!tied() && lease.grad(LM_HEAD))
    ops_.matmul_backward(Elems(), lease.grad(LM_HEAD), nullptr, a.saved.logits, a.lnf, lease.param_elems(LM_HEAD), N,
                         C, Vl);
  // The op always writes an input gradient too: into the scratch dln, which nothing reads now.
  norm_backward(scratch_.dln, lease.grad(FINAL_NORM), a.saved.lnf, a.residual3 + (a.blocks - 1) * Nr * C,
                lease.param_elems(FINAL_NORM), a.lnf_rstd, N);
  lease.release(true);
}

void LlamaModel::block_backward(Activations& a, int64_t l, const keel_param_access* access, SavedOutputGrads* save) {
  Scratch& g = scratch_;
  const int64_t C = config_.d_model, B = a.B, T = a.T, N = B * T, Nr = tp_.norm_rows(N);
  const int64_t Cq = share_.q_width, QKV = share_.qkv_width, F = share_.hidden;
  const int32_t layer = static_cast<int32_t>(1 + plan_.first_block(a.chunk) + l);
  LayerLease lease(access, layer, save ? KEEL_PHASE_FORWARD : KEEL_PHASE_BACKWARD, layer_specs(layer),
                   layer_size(layer));
  const LayerLease* grads = save ? nullptr : &lease;  // INPUT part: no weight gradients
  prepare_weights(lease, layer - 1, a.dropout_seed);
  auto w = [&](int i) { return weight(lease, BlockTensor(i)); };
  auto dw = [&](int i) { return weight_grad(grads, BlockTensor(i)); };
  const Elems residual = l == 0 ? a.encoded : a.residual3 + (l - 1) * Nr * C;
  const BlockActivations v = block_activations(a, l);
  stack_weights(lease, !v.moe);
  recompute_block(v, residual, lease, B, T, /*for_input=*/true);

  // LoRA's dropout: each input's adapters add their share of its gradient (and, with weight
  // gradients, form theirs) from the same mask as the forward's.
  using keel_support::kAttentionInput, keel_support::kAttentionOutput, keel_support::kMlpInput, keel_support::kMlpHidden;
  const int64_t piece = tp_.active() ? tp_.rank() : 0;

  // MLP branch. dresidual holds ∂/∂residual3, also the gradient of down_proj's output.
  const Elems ddown = tp_.leave_backward(g.dresidual, g.dgathered, N);
  if (save) ops_.copy(save->down + l * N * C, ddown, N * C);
  if (v.moe) {  // a sparse MLP (llama_moe.cpp): dln overwritten
    sparse_->backward(g.dln, ddown, v.ln2, *v.moe, LayerWeights{lease, grads, lora_, qat_, v.dropout_seed, v.block}, N);
  } else {
    ops_.fill_zero(g.dact, N * F);
    ops_.fill_zero(g.dgate_up, N * 2 * F);
    ops_.fill_zero(g.dln, N * C);
    // down_proj's bias is replicated: ddown holds every row, so its gradient is whole on every rank.
    ops_.matmul_backward(g.dact, dw(DOWN_W), bias_grad(grads, DOWN_B), ddown, v.act, w(DOWN_W), N, F, C);
    lora_->dropped_backward(g.dact, grads, ddown, v.act, N, F, {{DOWN_W, C}}, input_seed(v, kMlpHidden), piece * F);
    ops_.swiglu_backward(g.dgate_up, g.dact, v.gate_up, N, F);
    if (save) ops_.copy(save->gate_up + l * N * 2 * F, g.dgate_up, N * 2 * F);
    stacked_backward(gate_up_, g.dln, g.dgate_up, v.ln2, N, grads, {{GATE_W, GATE_B}, {UP_W, UP_B}});
    lora_->dropped_backward(g.dln, grads, g.dgate_up, v.ln2, N, C, {{GATE_W, F}, {UP_W, F}}, input_seed(v, kMlpInput),
                            0);
  }
  const Elems dln2 = tp_.enter_backward(g.dln, g.dln_rows, N);
  if (save) ops_.copy(save->ln2 + l * Nr * C, dln2, Nr * C);
  norm_backward(g.dresidual, dw(POST_NORM), dln2, v.residual2, w(POST_NORM), v.ln2_rstd, N);

  // Attention branch: dresidual is now ∂/∂residual2.
  const Elems do_out = tp_.leave_backward(g.dresidual, g.dgathered, N);
  if (save) ops_.copy(save->o + l * N * C, do_out, N * C);
  ops_.fill_zero(g.datty, N * Cq);
  ops_.fill_zero(g.dqkv, N * QKV);
  ops_.fill_zero(g.dln, N * C);
  ops_.matmul_backward(g.datty, dw(O_W), nullptr, do_out, grads ? o_input(v.atty, N) : v.atty, w(O_W), N, Cq, C);
  lora_->dropped_backward(g.datty, grads, do_out, v.atty, N, Cq, {{O_W, C}}, input_seed(v, kAttentionOutput),
                          piece * Cq);
  attend_backward(v, g.dqkv, g.datty, B, T);
  turn_qk_backward(v, g.dqkv, B, T);
  if (save) ops_.copy(save->qkv + l * N * QKV, g.dqkv, N * QKV);
  stacked_backward(qkv_, g.dln, g.dqkv, v.ln1, N, grads, {{Q_W, Q_B}, {K_W, K_B}, {V_W, V_B}});
  lora_->dropped_backward(g.dln, grads, g.dqkv, v.ln1, N, C, qkv_parts(), input_seed(v, kAttentionInput), 0);
  const Elems dln1 = tp_.enter_backward(g.dln, g.dln_rows, N);
  if (save) ops_.copy(save->ln1 + l * Nr * C, dln1, Nr * C);
  norm_backward(g.dresidual, dw(IN_NORM), dln1, residual, w(IN_NORM), v.ln1_rstd, N);
  if (lora_->active() && grads) lora_->fold(lease);
  lease.release(!save);
}

void LlamaModel::block_weight_backward(Activations& a, int64_t l, const keel_param_access* access) {
  const SavedOutputGrads& d = a.saved;
  const int64_t C = config_.d_model, N = int64_t(a.B) * a.T, Nr = tp_.norm_rows(N);
  const int64_t Cq = share_.q_width, QKV = share_.qkv_width, F = share_.hidden;
  const int32_t layer = static_cast<int32_t>(1 + plan_.first_block(a.chunk) + l);
  LayerLease lease(access, layer, KEEL_PHASE_BACKWARD, layer_specs(layer), layer_size(layer));
  prepare_weights(lease, layer - 1, a.dropout_seed);
  auto w = [&](int i) { return weight(lease, BlockTensor(i)); };
  auto dw = [&](int i) { return weight_grad(&lease, BlockTensor(i)); };
  const Elems residual = l == 0 ? a.encoded : a.residual3 + (l - 1) * Nr * C;
  const BlockActivations v = block_activations(a, l);
  stack_weights(lease, !v.moe);
  recompute_block(v, residual, lease, a.B, a.T, /*for_input=*/false);  // FULL: again, the INPUT part's is gone
  // LoRA's dropout: the adapters' gradients from each input's dropped copy (Elems(): no input gradient).
  using keel_support::kAttentionInput, keel_support::kAttentionOutput, keel_support::kMlpInput, keel_support::kMlpHidden;
  const int64_t piece = tp_.active() ? tp_.rank() : 0;
  ops_.matmul_backward(Elems(), dw(DOWN_W), bias_grad(&lease, DOWN_B), d.down + l * N * C, v.act, w(DOWN_W), N,
                       share_.hidden, C);
  lora_->dropped_backward(Elems(), true, d.down + l * N * C, v.act, N, F, {{DOWN_W, C}}, input_seed(v, kMlpHidden),
                          piece * F);
  stacked_backward(gate_up_, Elems(), d.gate_up + l * N * 2 * F, v.ln2, N, &lease, {{GATE_W, GATE_B}, {UP_W, UP_B}});
  lora_->dropped_backward(Elems(), true, d.gate_up + l * N * 2 * F, v.ln2, N, C, {{GATE_W, F}, {UP_W, F}},
                          input_seed(v, kMlpInput), 0);
  norm_backward(scratch_.dln, dw(POST_NORM), d.ln2 + l * Nr * C, v.residual2, w(POST_NORM), v.ln2_rstd, N);
  ops_.matmul_backward(Elems(), dw(O_W), nullptr, d.o + l * N * C, o_input(v.atty, N), w(O_W), N, Cq, C);
  lora_->dropped_backward(Elems(), true, d.o + l * N * C, v.atty, N, Cq, {{O_W, C}}, input_seed(v, kAttentionOutput),
                          piece * Cq);
  stacked_backward(qkv_, Elems(), d.qkv + l * N * QKV, v.ln1, N, &lease, {{Q_W, Q_B}, {K_W, K_B}, {V_W, V_B}});
  lora_->dropped_backward(Elems(), true, d.qkv + l * N * QKV, v.ln1, N, C, qkv_parts(), input_seed(v, kAttentionInput),
                          0);
  norm_backward(scratch_.dln, dw(IN_NORM), d.ln1 + l * Nr * C, residual, w(IN_NORM), v.ln1_rstd, N);
  if (lora_->active()) lora_->fold(lease);
  lease.release(true);
}

void LlamaModel::embedding_backward(Activations& a, const keel_param_access* access, Elems dencoded_rows) {
  const int64_t C = config_.d_model, N = int64_t(a.B) * a.T;
  LayerLease lease(access, 0, KEEL_PHASE_BACKWARD, layer_specs(0), layer_size(0));
  // Every rank sees every row's gradient and scatters those of its vocabulary rows.
  const Elems dencoded = tp_.active() ? tp_.leave_backward(dencoded_rows, scratch_.dgathered, N) : dencoded_rows;
  if (lease.grad(EMBED))  // NULL: frozen (a LoRA run's base)
    ops_.embedding_rows_backward(lease.grad(EMBED), nullptr, dencoded, a.tokens, a.B, a.T, C, share_.vocab.begin,
                                 share_.vocab.rows);
  lease.release(true);
}

}  // namespace keel_llama
