// The sparse MLP's forward and backward through the backend's routing ops (backend.h 0.19):
// moe_route, moe_permute_plan, moe_permute_dt / moe_unpermute_dt, and the grouped matmuls with
// SwiGLU between. Qwen2-MoE's shared expert reuses the same ops for its sigmoid gate (moe_route
// with one expert) and its per-row scale (moe_unpermute with the identity order), so no op is
// added for it and its gradients follow from the ops' own backwards.
#include "llama_moe.hpp"

#include <keel_support/common/backend_ops.hpp>  // defines: KEEL_OP

#include <algorithm>
#include <numeric>

namespace keel_llama {

using keel_support::Carver;
using keel_support::LayerLease;

SparseMlp::SparseMlp(const keel_host* host, const LlamaConfig& config, const keel_support::BackendOps& backend,
                     const ComputeOps& ops, int32_t first_slot, int32_t shared_gate_w, int32_t shared_up_w,
                     int32_t shared_down_w)
    : host_(host),
      be_(backend),
      ops_(ops),
      moe_(config.moe),
      qwen2_(config.attention_bias),
      C_(config.d_model),
      E_(config.moe.n_experts),
      K_(config.moe.n_experts_per_token),
      Fe_(config.moe.expert_ffn_hidden),
      S_(config.moe.shared_expert_ffn_hidden) {
  flags_ = (moe_.norm_topk_prob ? KEEL_ROUTE_NORMALIZE : 0) |
           (moe_.router_scores == RouterScores::SIGMOID ? KEEL_ROUTE_SIGMOID : 0);
  router_ = first_slot;
  shared_gate_ = S_ > 0 ? first_slot + 1 : -1;
  expert_first_ = first_slot + (S_ > 0 ? 2 : 1);
  shared_w_[0] = shared_gate_w, shared_w_[1] = shared_up_w, shared_w_[2] = shared_down_w;
  auto carve_all = [&](char* base) {
    Carver carve(base);
    experts_gate_up_ = ops_.at(carve.take<char>(int64_t(ops_.bytes(E_ * 2 * Fe_ * C_))));
    dexperts_gate_up_ = carve.take<float>(E_ * 2 * Fe_ * C_);
    shared_stack_ = ops_.at(carve.take<char>(int64_t(ops_.bytes(2 * S_ * C_))));
    dshared_stack_ = carve.take<float>(2 * S_ * C_);
    return carve.used();
  };
  stacked_memory_ = be_.alloc_bytes(carve_all(nullptr));
  carve_all(static_cast<char*>(stacked_memory_.get()));
  expert_dscores_ = be_.alloc_bytes(size_t(E_) * sizeof(float));
  expert_dscores_host_.assign(size_t(E_), 0.0f);
}

std::vector<MoeTensor> SparseMlp::shared_expert_tensors(const std::string& prefix) const {
  if (S_ == 0) return {};
  const std::string h = prefix + "mlp.shared_expert.";
  return {{h + "gate_proj.weight", S_, C_}, {h + "up_proj.weight", S_, C_}, {h + "down_proj.weight", C_, S_}};
}

std::vector<MoeTensor> SparseMlp::routed_tensors(const std::string& prefix) const {
  std::vector<MoeTensor> out;
  const std::string block = prefix + (qwen2_ ? "mlp." : "block_sparse_moe.");
  out.push_back({block + "gate.weight", E_, C_});
  if (S_ > 0) out.push_back({block + "shared_expert_gate.weight", 1, C_});
  for (int64_t e = 0; e < E_; ++e) {
    const std::string h = block + "experts." + std::to_string(e) + ".";
    out.push_back({h + (qwen2_ ? "gate_proj" : "w1") + ".weight", Fe_, C_});
    out.push_back({h + (qwen2_ ? "up_proj" : "w3") + ".weight", Fe_, C_});
    out.push_back({h + (qwen2_ ? "down_proj" : "w2") + ".weight", C_, Fe_});
  }
  return out;
}

void SparseMlp::carve_block(MoeBlockState& st, Carver& carve, int64_t N) const {
  auto elems = [&](int64_t n) { return ops_.at(carve.take<char>(int64_t(ops_.bytes(n)))); };
  const int64_t NK = N * K_, shared = S_ > 0 ? 1 : 0;
  st.logits = carve.take<float>(N * E_);
  st.scores = carve.take<float>(N * E_);
  st.weights = carve.take<float>(NK);
  st.experts = carve.take<int32_t>(NK);
  st.positions = carve.take<int32_t>(NK);
  st.xperm = elems(NK * C_);
  st.gate_up = elems(NK * 2 * Fe_);
  st.act = elems(NK * Fe_);
  st.expert_out = elems(NK * C_);
  st.shared_gate_up = elems(shared * N * 2 * S_);
  st.shared_act = elems(shared * N * S_);
  st.shared_out = elems(shared * N * C_);
  st.shared_gate_logit = carve.take<float>(shared * N);
  st.shared_gate_score = carve.take<float>(shared * N);
  st.shared_gate = carve.take<float>(shared * N);
  st.shared_choice = carve.take<int32_t>(shared * N);
  st.counts.assign(size_t(E_), 0);
}

void SparseMlp::ensure_state(MoeState& state, int64_t N, int64_t first_block, int64_t blocks) const {
  if (state.rows == N && state.blocks) return;
  state.memory = keel_support::BackendBuffer();
  state.blocks = std::make_unique<MoeBlockState[]>(size_t(blocks));
  auto carve_all = [&](char* base) {
    Carver carve(base);
    for (int64_t l = 0; l < blocks; ++l)
      if (moe_.sparse(first_block + l)) {
        carve_block(state.blocks[size_t(l)], carve, N);
        state.blocks[size_t(l)].block = first_block + l;
      }
    return carve.used();
  };
  state.memory = be_.alloc_bytes(carve_all(nullptr));
  carve_all(static_cast<char*>(state.memory.get()));
  state.rows = N;
}

void SparseMlp::ensure_scratch(int64_t N) {
  if (scratch_.rows >= N) return;
  const int64_t NK = N * K_, shared = S_ > 0 ? 1 : 0;
  auto carve_all = [&](char* base) {
    Carver carve(base);
    auto elems = [&](int64_t n) { return ops_.at(carve.take<char>(int64_t(ops_.bytes(n)))); };
    Scratch& s = scratch_;
    s.dweights = carve.take<float>(NK);
    s.dlogits = carve.take<float>(N * E_);
    s.dexpert_out = elems(NK * C_);
    s.dact = elems(NK * Fe_);
    s.dgate_up = elems(NK * 2 * Fe_);
    s.dxperm = elems(NK * C_);
    s.shared_part = elems(shared * N * C_);
    s.dshared_out = elems(shared * N * C_);
    s.dshared_act = elems(shared * N * S_);
    s.dshared_gate_up = elems(shared * N * 2 * S_);
    s.dshared_gate = carve.take<float>(shared * N);
    s.dshared_logit = carve.take<float>(shared * N);
    s.identity = carve.take<int32_t>(shared * N);
    s.router_dt = elems(keel_support::is_fp32(ops_.dtype()) ? 0 : N * E_);
    return carve.used();
  };
  scratch_.memory = keel_support::BackendBuffer();
  scratch_.memory = be_.alloc_bytes(carve_all(nullptr));
  carve_all(static_cast<char*>(scratch_.memory.get()));
  scratch_.rows = N;
  if (S_ > 0) {
    std::vector<int32_t> identity(static_cast<size_t>(N));
    std::iota(identity.begin(), identity.end(), 0);
    KEEL_OP(be_, copy, scratch_.identity, identity.data(), identity.size() * sizeof(int32_t),
            KEEL_COPY_HOST_TO_DEVICE);
  }
}

void SparseMlp::router_forward(float* logits, Elems x, Elems w, int64_t N, int64_t OC) {
  if (keel_support::is_fp32(ops_.dtype())) return ops_.matmul_forward(ops_.at(logits), x, w, Elems(), N, C_, OC);
  ops_.matmul_forward(scratch_.router_dt, x, w, Elems(), N, C_, OC);
  ops_.to_fp32(logits, scratch_.router_dt, N * OC);
}

void SparseMlp::router_backward(Elems dx, float* dw, float* dlogits, Elems x, Elems w, int64_t N, int64_t OC) {
  if (keel_support::is_fp32(ops_.dtype()))
    return ops_.matmul_backward(dx, dw, nullptr, ops_.at(dlogits), x, w, N, C_, OC);
  KEEL_OP(be_, convert, scratch_.router_dt.get(), ops_.dtype(), dlogits, keel_dtype{KEEL_DTYPE_FLOAT, 32, 1}, N * OC);
  ops_.matmul_backward(dx, dw, nullptr, scratch_.router_dt, x, w, N, C_, OC);
}

void SparseMlp::stack_expert_weights(const LayerLease& lease) {
  for (int32_t e = 0; e < E_; ++e) {
    const Elems dst = experts_gate_up_ + e * 2 * Fe_ * C_;
    ops_.copy(dst, lease.param_elems(size_t(expert_slot(e, 0))), Fe_ * C_);
    ops_.copy(dst + Fe_ * C_, lease.param_elems(size_t(expert_slot(e, 1))), Fe_ * C_);
  }
}

void SparseMlp::stack_shared_weights(const LayerLease& lease) {
  ops_.copy(shared_stack_, lease.param_elems(size_t(shared_w_[0])), S_ * C_);
  ops_.copy(shared_stack_ + S_ * C_, lease.param_elems(size_t(shared_w_[1])), S_ * C_);
}

void SparseMlp::forward(MoeBlockState& st, Elems out, Elems x, const LayerLease& lease, int64_t N) {
  const keel_dtype dt = ops_.dtype();
  const int64_t NK = N * K_;
  const int32_t E = int32_t(E_), K = int32_t(K_);
  ensure_scratch(N);
  // Route: logits = gate(x); the k experts of each token and their weights; the pairs in expert order.
  router_forward(st.logits, x, lease.param_elems(size_t(router_)), N, E_);
  KEEL_OP(be_, moe_route, st.weights, st.experts, st.scores, st.logits, nullptr, N, E, K, flags_);
  KEEL_OP(be_, moe_permute_plan, st.positions, st.counts.data(), st.experts, N, E, K);
  keel_logf(host_, KEEL_LOG_DEBUG, "model llama", "layer %lld: tokens per expert max %lld, mean %.2f",
            static_cast<long long>(st.block), static_cast<long long>(*std::max_element(st.counts.begin(), st.counts.end())),
            double(NK) / double(E_));
  KEEL_OP(be_, moe_permute_dt, dt, st.xperm.get(), x.get(), nullptr, st.positions, N, K, C_);
  // Each expert's SwiGLU on its rows: down(silu(gate·x) ⊙ up·x).
  stack_expert_weights(lease);
  std::vector<const void*> gate_up(static_cast<size_t>(E_)), down(static_cast<size_t>(E_));
  for (int32_t e = 0; e < E; ++e) {
    gate_up[size_t(e)] = (experts_gate_up_ + e * 2 * Fe_ * C_).get();
    down[size_t(e)] = lease.param_elems(size_t(expert_slot(e, 2))).get();
  }
  KEEL_OP(be_, grouped_matmul_forward_dt, dt, st.gate_up.get(), st.xperm.get(), gate_up.data(), st.counts.data(), E,
          C_, 2 * Fe_);
  ops_.swiglu_forward(st.act, st.gate_up, NK, Fe_);
  KEEL_OP(be_, grouped_matmul_forward_dt, dt, st.expert_out.get(), st.act.get(), down.data(), st.counts.data(), E,
          Fe_, C_);
  // Back to token order, each token's k outputs summed with their weights.
  KEEL_OP(be_, moe_unpermute_dt, dt, out.get(), st.expert_out.get(), st.weights, st.positions, N, K, C_);
  if (S_ > 0) shared_forward(st, out, x, lease, N);
}

// Qwen2-MoE: out += sigmoid(shared_expert_gate(x)) · down(silu(gate·x) ⊙ up·x).
void SparseMlp::shared_forward(MoeBlockState& st, Elems out, Elems x, const LayerLease& lease, int64_t N) {
  const keel_dtype dt = ops_.dtype();
  stack_shared_weights(lease);
  ops_.matmul_forward(st.shared_gate_up, x, shared_stack_, Elems(), N, C_, 2 * S_);
  ops_.swiglu_forward(st.shared_act, st.shared_gate_up, N, S_);
  ops_.matmul_forward(st.shared_out, st.shared_act, lease.param_elems(size_t(shared_w_[2])), Elems(), N, S_, C_);
  router_forward(st.shared_gate_logit, x, lease.param_elems(size_t(shared_gate_)), N, 1);
  KEEL_OP(be_, moe_route, st.shared_gate, st.shared_choice, st.shared_gate_score, st.shared_gate_logit, nullptr, N, 1,
          1, KEEL_ROUTE_SIGMOID);
  KEEL_OP(be_, moe_unpermute_dt, dt, scratch_.shared_part.get(), st.shared_out.get(), st.shared_gate,
          scratch_.identity, N, 1, C_);
  ops_.add(out, out, scratch_.shared_part, N * C_);
}

// transformers' load_balancing_loss_func over the R = (sparse layers)·N router rows of the
// micro-batch: aux = E · Σ_e f_e · P_e, f_e = (pairs choosing e) / R, P_e = Σ_rows scores[:,e] / R.
// Only P depends on the scores: d aux / d scores[r,e] = E · f_e / R for every row. The z-loss is
// the mean over the same rows of lse², each row's gradient weight 1 / R.
void SparseMlp::begin_backward(const MoeState& state, int64_t first_block, int64_t blocks, int64_t N,
                               float loss_scale) {
  int64_t sparse_blocks = 0;
  std::vector<double> pairs(size_t(E_), 0.0);
  for (int64_t l = 0; l < blocks; ++l) {
    if (!moe_.sparse(first_block + l)) continue;
    ++sparse_blocks;
    const MoeBlockState& st = state.blocks[size_t(l)];
    for (int64_t e = 0; e < E_; ++e) pairs[size_t(e)] += double(st.counts[size_t(e)]);
    scores_host_.resize(size_t(N * E_));
    KEEL_OP(be_, copy, scores_host_.data(), st.scores, scores_host_.size() * sizeof(float), KEEL_COPY_DEVICE_TO_HOST);
    tally_.add_layer(st.block, st.counts, scores_host_, N);
  }
  tally_.end_microbatch();
  const double rows = double(sparse_blocks) * double(N);
  balancing_ = moe_.router_aux_loss_coef > 0 && rows > 0;
  z_grad_ = rows > 0 ? float(double(loss_scale) * moe_.router_z_loss_coef / rows) : 0.0f;
  if (!balancing_) return;
  for (int64_t e = 0; e < E_; ++e)
    expert_dscores_host_[size_t(e)] = float(double(loss_scale) * moe_.router_aux_loss_coef * double(E_) *
                                            (pairs[size_t(e)] / rows) / rows);
  KEEL_OP(be_, copy, expert_dscores_.floats(), expert_dscores_host_.data(), size_t(E_) * sizeof(float),
          KEEL_COPY_HOST_TO_DEVICE);
}

void SparseMlp::backward(Elems dx, Elems dout, Elems x, MoeBlockState& st, const LayerLease& lease,
                         const LayerLease* grads, int64_t N) {
  const keel_dtype dt = ops_.dtype();
  const int64_t NK = N * K_;
  const int32_t E = int32_t(E_), K = int32_t(K_);
  Scratch& s = scratch_;
  ensure_scratch(N);
  // The gather: each pair's output gradient (scaled by its weight) and each weight's gradient.
  KEEL_OP(be_, moe_permute_dt, dt, s.dexpert_out.get(), dout.get(), st.weights, st.positions, N, K, C_);
  KEEL_OP(be_, fill_zero, s.dweights, size_t(NK) * sizeof(float));
  KEEL_OP(be_, moe_unpermute_scale_backward_dt, dt, s.dweights, dout.get(), st.expert_out.get(), st.positions, N, K,
          C_);
  // The experts' down and gate|up projections, their weight gradients straight into each expert's.
  stack_expert_weights(lease);
  std::vector<const void*> gate_up(static_cast<size_t>(E_)), down(static_cast<size_t>(E_));
  std::vector<float*> dgate_up(static_cast<size_t>(E_)), ddown(static_cast<size_t>(E_));
  for (int32_t e = 0; e < E; ++e) {
    gate_up[size_t(e)] = (experts_gate_up_ + e * 2 * Fe_ * C_).get();
    down[size_t(e)] = lease.param_elems(size_t(expert_slot(e, 2))).get();
    dgate_up[size_t(e)] = dexperts_gate_up_ + e * 2 * Fe_ * C_;
    ddown[size_t(e)] = grads ? grads->grad(size_t(expert_slot(e, 2))) : nullptr;
  }
  ops_.fill_zero(s.dact, NK * Fe_);
  KEEL_OP(be_, grouped_matmul_backward_dt, dt, s.dact.get(), grads ? ddown.data() : nullptr, s.dexpert_out.get(),
          st.act.get(), down.data(), st.counts.data(), E, Fe_, C_);
  ops_.fill_zero(s.dgate_up, NK * 2 * Fe_);
  ops_.swiglu_backward(s.dgate_up, s.dact, st.gate_up, NK, Fe_);
  ops_.fill_zero(s.dxperm, NK * C_);
  if (grads) KEEL_OP(be_, fill_zero, dexperts_gate_up_, size_t(E_ * 2 * Fe_ * C_) * sizeof(float));
  KEEL_OP(be_, grouped_matmul_backward_dt, dt, s.dxperm.get(), grads ? dgate_up.data() : nullptr, s.dgate_up.get(),
          st.xperm.get(), gate_up.data(), st.counts.data(), E, C_, 2 * Fe_);
  if (grads)
    for (int32_t e = 0; e < E; ++e) {
      KEEL_OP(be_, accumulate, grads->grad(size_t(expert_slot(e, 0))), dgate_up[size_t(e)], Fe_ * C_);
      KEEL_OP(be_, accumulate, grads->grad(size_t(expert_slot(e, 1))), dgate_up[size_t(e)] + Fe_ * C_, Fe_ * C_);
    }
  // The scatter's input gradient: each token's k pair gradients summed (dx overwritten here).
  KEEL_OP(be_, moe_unpermute_dt, dt, dx.get(), s.dxperm.get(), nullptr, st.positions, N, K, C_);
  // The router: the weights' gradient, plus the balancing losses', through the routing to the logits.
  KEEL_OP(be_, moe_route_backward, s.dlogits, s.dweights, st.logits, st.scores, st.experts,
          balancing_ ? expert_dscores_.floats() : nullptr, z_grad_, N, E, K, flags_);
  router_backward(dx, grads ? grads->grad(size_t(router_)) : nullptr, s.dlogits, x,
                  lease.param_elems(size_t(router_)), N, E_);
  if (S_ > 0) shared_backward(dx, dout, x, st, lease, grads, N);
}

void SparseMlp::shared_backward(Elems dx, Elems dout, Elems x, MoeBlockState& st, const LayerLease& lease,
                                const LayerLease* grads, int64_t N) {
  const keel_dtype dt = ops_.dtype();
  Scratch& s = scratch_;
  KEEL_OP(be_, moe_permute_dt, dt, s.dshared_out.get(), dout.get(), st.shared_gate, s.identity, N, 1, C_);
  KEEL_OP(be_, fill_zero, s.dshared_gate, size_t(N) * sizeof(float));
  KEEL_OP(be_, moe_unpermute_scale_backward_dt, dt, s.dshared_gate, dout.get(), st.shared_out.get(), s.identity, N, 1,
          C_);
  ops_.fill_zero(s.dshared_act, N * S_);
  ops_.matmul_backward(s.dshared_act, grads ? grads->grad(size_t(shared_w_[2])) : nullptr, nullptr, s.dshared_out,
                       st.shared_act, lease.param_elems(size_t(shared_w_[2])), N, S_, C_);
  ops_.fill_zero(s.dshared_gate_up, N * 2 * S_);
  ops_.swiglu_backward(s.dshared_gate_up, s.dshared_act, st.shared_gate_up, N, S_);
  stack_shared_weights(lease);
  if (grads) KEEL_OP(be_, fill_zero, dshared_stack_, size_t(2 * S_ * C_) * sizeof(float));
  ops_.matmul_backward(dx, grads ? dshared_stack_ : nullptr, nullptr, s.dshared_gate_up, x, shared_stack_, N, C_,
                       2 * S_);
  if (grads) {
    KEEL_OP(be_, accumulate, grads->grad(size_t(shared_w_[0])), dshared_stack_, S_ * C_);
    KEEL_OP(be_, accumulate, grads->grad(size_t(shared_w_[1])), dshared_stack_ + S_ * C_, S_ * C_);
  }
  KEEL_OP(be_, moe_route_backward, s.dshared_logit, s.dshared_gate, st.shared_gate_logit, st.shared_gate_score,
          st.shared_choice, nullptr, 0.0f, N, 1, 1, KEEL_ROUTE_SIGMOID);
  router_backward(dx, grads ? grads->grad(size_t(shared_gate_)) : nullptr, s.dshared_logit, x,
                  lease.param_elems(size_t(shared_gate_)), N, 1);
}

}  // namespace keel_llama
