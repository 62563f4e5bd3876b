// The sparse MLP's forward and backward through the backend's routing ops (backend.h 0.19):
// moe_route, moe_permute_plan, moe_permute_dt / moe_unpermute_dt, and the grouped matmuls with
// SwiGLU between. Qwen2-MoE's shared expert reuses the same ops for its sigmoid gate (moe_route
// with one expert) and its per-row scale (moe_unpermute with the identity order), so no op is
// added for it and its gradients follow from the ops' own backwards. LoRA's dropout: the routers'
// and the shared expert's adapters read token rows (LoraLayer::add_dropped, the dense MLP's masks);
// the routed experts' read their rows in expert order, whose masks are keyed by (token, slot) pair
// (drop_expert_rows), so a reference draws them from the routing alone.
#include "llama_moe.hpp"

#include <keel_support/common/backend_ops.hpp>  // defines: KEEL_OP

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace keel_llama {

using keel_support::Carver;
using keel_support::LayerLease;

namespace {
// A block's (token, slot) pairs, the dropped ones (capacity) included: N·K.
int64_t pair_rows(const MoeBlockState& st) { return std::accumulate(st.counts.begin(), st.counts.end(), int64_t(0)); }
}  // namespace

SparseMlp::SparseMlp(const keel_host* host, const LlamaConfig& config, const keel_support::BackendOps& backend,
                     const ComputeOps& ops, int32_t first_slot, int32_t shared_gate_w, int32_t shared_up_w,
                     int32_t shared_down_w, std::unique_ptr<ExpertDispatch> dispatch,
                     std::vector<int64_t> held_sparse_blocks)
    : host_(host),
      be_(backend),
      ops_(ops),
      moe_(config.moe),
      qwen2_(config.attention_bias),
      C_(config.d_model),
      E_(config.moe.n_experts),
      K_(config.moe.n_experts_per_token),
      Fe_(config.moe.expert_ffn_hidden),
      S_(config.moe.shared_expert_ffn_hidden),
      dispatch_(std::move(dispatch)),
      El_(dispatch_ ? dispatch_->local_experts() : E_) {
  flags_ = (moe_.norm_topk_prob ? KEEL_ROUTE_NORMALIZE : 0) |
           (moe_.router_scores == RouterScores::SIGMOID ? KEEL_ROUTE_SIGMOID : 0);
  router_ = first_slot;
  shared_gate_ = S_ > 0 ? first_slot + 1 : -1;
  expert_first_ = first_slot + (S_ > 0 ? 2 : 1);
  shared_w_[0] = shared_gate_w, shared_w_[1] = shared_up_w, shared_w_[2] = shared_down_w;
  auto carve_all = [&](char* base) {
    Carver carve(base);
    experts_gate_up_ = ops_.at(carve.take<char>(int64_t(ops_.bytes(El_ * 2 * Fe_ * C_))));
    dexperts_gate_up_ = carve.take<float>(El_ * 2 * Fe_ * C_);
    shared_stack_ = ops_.at(carve.take<char>(int64_t(ops_.bytes(2 * S_ * C_))));
    dshared_stack_ = carve.take<float>(2 * S_ * C_);
    return carve.used();
  };
  stacked_memory_ = be_.alloc_bytes(carve_all(nullptr));
  carve_all(static_cast<char*>(stacked_memory_.get()));
  if (dispatch_) ddown_memory_ = be_.alloc_bytes(size_t(El_ * C_ * Fe_) * sizeof(float));
  for (int64_t i = 0; i < config.n_layer; ++i) model_sparse_blocks_ += moe_.sparse(i) ? 1 : 0;
  if (moe_.router_bias_update_speed > 0)
    bias_ = std::make_unique<ExpertBias>(be_, std::move(held_sparse_blocks), E_, moe_.router_bias_update_speed);
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
  // This rank's experts only, under their global numbers, so every ep names a tensor alike.
  const int64_t first = dispatch_ ? dispatch_->first_expert() : 0;
  for (int64_t e = first; e < first + El_; ++e) {
    const std::string h = block + "experts." + std::to_string(e) + ".";
    out.push_back({h + (qwen2_ ? "gate_proj" : "w1") + ".weight", Fe_, C_, true});
    out.push_back({h + (qwen2_ ? "up_proj" : "w3") + ".weight", Fe_, C_, true});
    out.push_back({h + (qwen2_ ? "down_proj" : "w2") + ".weight", C_, Fe_, true});
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
  const int64_t here = dispatch_ ? 0 : NK;  // at ep > 1 the received rows live in local_memory
  st.gate_up = elems(here * 2 * Fe_);
  st.act = elems(here * Fe_);
  st.local_x = dispatch_ ? Elems() : st.xperm;
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
    const int64_t here = dispatch_ ? 0 : NK;  // at ep > 1 the received rows' are in ep_
    s.dact = elems(here * Fe_);
    s.dgate_up = elems(here * 2 * Fe_);
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

void SparseMlp::router_forward(float* logits, Elems x, const LayerWeights& w, int32_t slot, int64_t N, int64_t OC) {
  const bool fp32 = keel_support::is_fp32(ops_.dtype());
  const Elems y = fp32 ? ops_.at(logits) : scratch_.router_dt;
  ops_.matmul_forward(y, x, w.weight(slot), Elems(), N, C_, OC);
  if (w.dropping()) w.lora->add_dropped(y, x, N, C_, {{size_t(slot), OC}}, w.seed(keel_support::kMlpInput), 0);
  if (!fp32) ops_.to_fp32(logits, y, N * OC);
}

void SparseMlp::router_backward(Elems dx, float* dlogits, Elems x, const LayerWeights& w, int32_t slot, int64_t N,
                                int64_t OC) {
  const bool fp32 = keel_support::is_fp32(ops_.dtype());
  const Elems dy = fp32 ? ops_.at(dlogits) : scratch_.router_dt;
  if (!fp32)
    KEEL_OP(be_, convert, dy.get(), ops_.dtype(), dlogits, keel_dtype{KEEL_DTYPE_FLOAT, 32, 1}, N * OC);
  ops_.matmul_backward(dx, w.grad(slot), nullptr, dy, x, w.weight(slot), N, C_, OC);
  if (w.dropping())
    w.lora->dropped_backward(dx, w.training(), dy, x, N, C_, {{size_t(slot), OC}}, w.seed(keel_support::kMlpInput), 0);
}

void SparseMlp::stack_expert_weights(const LayerWeights& w) {
  for (int32_t e = 0; e < El_; ++e) {
    const Elems dst = experts_gate_up_ + e * 2 * Fe_ * C_;
    ops_.copy(dst, w.weight(expert_slot(e, 0)), Fe_ * C_);
    ops_.copy(dst + Fe_ * C_, w.weight(expert_slot(e, 1)), Fe_ * C_);
  }
}

void SparseMlp::stack_shared_weights(const LayerWeights& w) {
  ops_.copy(shared_stack_, w.weight(shared_w_[0]), S_ * C_);
  ops_.copy(shared_stack_ + S_ * C_, w.weight(shared_w_[1]), S_ * C_);
}

void SparseMlp::forward(MoeBlockState& st, Elems out, Elems x, const LayerWeights& w, int64_t N) {
  const keel_dtype dt = ops_.dtype();
  const int64_t NK = N * K_;
  const int32_t E = int32_t(E_), K = int32_t(K_);
  ensure_scratch(N);
  // Route: logits = gate(x); the k experts of each token and their weights; the pairs in expert order.
  router_forward(st.logits, x, w, router_, N, E_);
  KEEL_OP(be_, moe_route, st.weights, st.experts, st.scores, st.logits, bias_ ? bias_->device(st.block) : nullptr, N,
          E, K, flags_);
  KEEL_OP(be_, moe_permute_plan, st.positions, st.counts.data(), st.experts, N, E, K);
  keel_logf(host_, KEEL_LOG_DEBUG, "model llama", "layer %lld: tokens per expert max %lld, mean %.2f",
            static_cast<long long>(st.block), static_cast<long long>(*std::max_element(st.counts.begin(), st.counts.end())),
            double(NK) / double(E_));
  if (moe_.capacity_factor > 0) apply_capacity(st, N);
  else st.kept = st.counts, st.dropped = 0;
  KEEL_OP(be_, moe_permute_dt, dt, st.xperm.get(), x.get(), nullptr, st.positions, N, K, C_);
  // Each expert's SwiGLU on its rows: down(silu(gate·x) ⊙ up·x), here or on the experts' ranks.
  stack_expert_weights(w);
  if (!dispatch_) {
    experts_forward(st.xperm, st.gate_up, st.act, st.expert_out, st.kept, w, &st);
  } else {
    dispatch_->plan(st.route, st.kept);
    ensure_local(st, st.route.rows);
    ensure_ep_scratch(st.route.rows);
    dispatch_->to_experts(st.route, st.xperm, st.local_x, ep_.staging);
    experts_forward(st.local_x, st.gate_up, st.act, ep_.rows_out, st.route.local_counts, w, nullptr);
    dispatch_->from_experts(st.route, ep_.rows_out, st.expert_out, ep_.staging);
  }
  // A dropped pair adds nothing: its rows of the experts' output, after the kept ones, are zero.
  if (st.dropped > 0) ops_.fill_zero(st.expert_out + (NK - st.dropped) * C_, st.dropped * C_);
  // Back to token order, each token's k outputs summed with their weights.
  KEEL_OP(be_, moe_unpermute_dt, dt, out.get(), st.expert_out.get(), st.weights, st.positions, N, K, C_);
  if (S_ > 0) shared_forward(st, out, x, w, N);
}

// GShard's capacity: an expert takes at most ceil(f·N·K/E) of the micro-batch's pairs, the first
// by token, then slot; the others are dropped (their token keeps its residual and the shared expert).
void SparseMlp::apply_capacity(MoeBlockState& st, int64_t N) {
  const int64_t NK = N * K_;
  const int64_t capacity = int64_t(std::ceil(moe_.capacity_factor * double(NK) / double(E_)));
  std::vector<int32_t> experts(static_cast<size_t>(NK)), positions(static_cast<size_t>(NK));
  KEEL_OP(be_, copy, experts.data(), st.experts, experts.size() * sizeof(int32_t), KEEL_COPY_DEVICE_TO_HOST);
  st.kept.assign(size_t(E_), 0);
  for (int64_t e = 0; e < E_; ++e) st.kept[size_t(e)] = std::min(st.counts[size_t(e)], capacity);
  std::vector<int64_t> next(size_t(E_), 0);  // each expert's next kept row
  for (int64_t e = 1; e < E_; ++e) next[size_t(e)] = next[size_t(e - 1)] + st.kept[size_t(e - 1)];
  const int64_t kept = next[size_t(E_ - 1)] + st.kept[size_t(E_ - 1)];
  std::vector<int64_t> taken(size_t(E_), 0);
  int64_t dropped = 0;
  for (int64_t i = 0; i < NK; ++i) {
    const size_t e = size_t(experts[size_t(i)]);
    positions[size_t(i)] = int32_t(taken[e] < capacity ? next[e] + taken[e]++ : kept + dropped++);
  }
  st.dropped = dropped;
  KEEL_OP(be_, copy, st.positions, positions.data(), positions.size() * sizeof(int32_t), KEEL_COPY_HOST_TO_DEVICE);
}

void SparseMlp::experts_forward(Elems x, Elems gate_up, Elems act, Elems out, const std::vector<int64_t>& counts,
                                const LayerWeights& w, const MoeBlockState* pairs) {
  const keel_dtype dt = ops_.dtype();
  const int64_t rows = std::accumulate(counts.begin(), counts.end(), int64_t(0));
  const ExpertDropout drop = expert_dropout(w, pairs);
  std::vector<const void*> gate_up_w(static_cast<size_t>(El_)), down_w(static_cast<size_t>(El_));
  for (int32_t e = 0; e < El_; ++e) {
    gate_up_w[size_t(e)] = (experts_gate_up_ + e * 2 * Fe_ * C_).get();
    down_w[size_t(e)] = w.weight(expert_slot(e, 2)).get();
  }
  KEEL_OP(be_, grouped_matmul_forward_dt, dt, gate_up.get(), x.get(), gate_up_w.data(), counts.data(), int32_t(El_), C_,
          2 * Fe_);
  if (drop.gate_up) {  // gate_up += drop(x)·Dᵀ, each expert's D on its rows
    const std::vector<const void*> deltas = gate_up_deltas(w);
    drop_expert_rows(drop_.dropped, x, *pairs, C_, w.seed(keel_support::kExpertInput), w.lora->dropout());
    KEEL_OP(be_, grouped_matmul_forward_dt, dt, drop_.product.get(), drop_.dropped.get(), deltas.data(), counts.data(),
            int32_t(El_), C_, 2 * Fe_);
    ops_.add(gate_up, gate_up, drop_.product, rows * 2 * Fe_);
  }
  ops_.swiglu_forward(act, gate_up, rows, Fe_);
  KEEL_OP(be_, grouped_matmul_forward_dt, dt, out.get(), act.get(), down_w.data(), counts.data(), int32_t(El_), Fe_, C_);
  if (drop.down) {  // out += drop(act)·Dᵀ; the rows of dropped pairs (capacity) hold zeros, not stale values
    const int64_t NK = pair_rows(*pairs);
    if (rows < NK) ops_.fill_zero(act + rows * Fe_, (NK - rows) * Fe_);
    const std::vector<const void*> deltas = down_deltas(w);
    drop_expert_rows(drop_.dropped, act, *pairs, Fe_, w.seed(keel_support::kExpertHidden), w.lora->dropout());
    KEEL_OP(be_, grouped_matmul_forward_dt, dt, drop_.product.get(), drop_.dropped.get(), deltas.data(), counts.data(),
            int32_t(El_), Fe_, C_);
    ops_.add(out, out, drop_.product, rows * C_);
  }
}

// A block's received rows and their projections, kept for its backward: grown, never shrunk, and
// never empty (a rank may receive no row, and a backend may refuse a null buffer).
void SparseMlp::ensure_local(MoeBlockState& st, int64_t rows) const {
  if (rows <= st.local_capacity && st.local_capacity > 0) return;
  const int64_t capacity = std::max<int64_t>(rows, 1);
  auto carve_all = [&](char* base) {
    Carver carve(base);
    auto elems = [&](int64_t n) { return ops_.at(carve.take<char>(int64_t(ops_.bytes(n)))); };
    st.local_x = elems(capacity * C_);
    st.gate_up = elems(capacity * 2 * Fe_);
    st.act = elems(capacity * Fe_);
    return carve.used();
  };
  st.local_memory = keel_support::BackendBuffer();
  st.local_memory = be_.alloc_bytes(carve_all(nullptr));
  carve_all(static_cast<char*>(st.local_memory.get()));
  st.local_capacity = capacity;
}

void SparseMlp::ensure_ep_scratch(int64_t rows) {
  if (rows <= ep_.rows && ep_.rows > 0) return;
  const int64_t capacity = std::max<int64_t>(rows, 1);
  auto carve_all = [&](char* base) {
    Carver carve(base);
    auto elems = [&](int64_t n) { return ops_.at(carve.take<char>(int64_t(ops_.bytes(n)))); };
    ep_.staging = elems(capacity * C_);
    ep_.rows_out = elems(capacity * C_);
    ep_.drows = elems(capacity * C_);
    ep_.dact = elems(capacity * Fe_);
    ep_.dgate_up = elems(capacity * 2 * Fe_);
    return carve.used();
  };
  ep_.memory = keel_support::BackendBuffer();
  ep_.memory = be_.alloc_bytes(carve_all(nullptr));
  carve_all(static_cast<char*>(ep_.memory.get()));
  ep_.rows = capacity;
}

// Qwen2-MoE: out += sigmoid(shared_expert_gate(x)) · down(silu(gate·x) ⊙ up·x).
void SparseMlp::shared_forward(MoeBlockState& st, Elems out, Elems x, const LayerWeights& w, int64_t N) {
  const keel_dtype dt = ops_.dtype();
  stack_shared_weights(w);
  ops_.matmul_forward(st.shared_gate_up, x, shared_stack_, Elems(), N, C_, 2 * S_);
  if (w.dropping())
    w.lora->add_dropped(st.shared_gate_up, x, N, C_, shared_gate_up_parts(), w.seed(keel_support::kMlpInput), 0);
  ops_.swiglu_forward(st.shared_act, st.shared_gate_up, N, S_);
  ops_.matmul_forward(st.shared_out, st.shared_act, w.weight(shared_w_[2]), Elems(), N, S_, C_);
  if (w.dropping())
    w.lora->add_dropped(st.shared_out, st.shared_act, N, S_, {{size_t(shared_w_[2]), C_}},
                        w.seed(keel_support::kMlpHidden), 0);
  router_forward(st.shared_gate_logit, x, w, shared_gate_, N, 1);
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
  int64_t sparse_blocks = 0;  // this chunk's; the losses' rows count the whole model's
  std::vector<double> pairs(size_t(E_), 0.0);
  for (int64_t l = 0; l < blocks; ++l) {
    if (!moe_.sparse(first_block + l)) continue;
    ++sparse_blocks;
    const MoeBlockState& st = state.blocks[size_t(l)];
    for (int64_t e = 0; e < E_; ++e) pairs[size_t(e)] += double(st.counts[size_t(e)]);
    scores_host_.resize(size_t(N * E_));
    KEEL_OP(be_, copy, scores_host_.data(), st.scores, scores_host_.size() * sizeof(float), KEEL_COPY_DEVICE_TO_HOST);
    tally_.add_layer(st.block, st.counts, scores_host_, N);
    if (moe_.capacity_factor > 0) tally_.add_dropped(st.dropped, N * K_);
    if (bias_) bias_->tally(st.block, st.counts);
  }
  tally_.end_microbatch();
  // A pipeline stage holds some of the sparse layers: the z-loss's mean runs over every layer's rows
  // (the balancing loss, which pairs them across layers, is refused at pp > 1).
  const double rows = double(model_sparse_blocks_) * double(N);
  balancing_ = moe_.router_aux_loss_coef > 0 && sparse_blocks > 0;
  z_grad_ = sparse_blocks > 0 ? float(double(loss_scale) * moe_.router_z_loss_coef / rows) : 0.0f;
  if (!balancing_) return;
  for (int64_t e = 0; e < E_; ++e)
    expert_dscores_host_[size_t(e)] = float(double(loss_scale) * moe_.router_aux_loss_coef * double(E_) *
                                            (pairs[size_t(e)] / rows) / rows);
  KEEL_OP(be_, copy, expert_dscores_.floats(), expert_dscores_host_.data(), size_t(E_) * sizeof(float),
          KEEL_COPY_HOST_TO_DEVICE);
}

void SparseMlp::backward(Elems dx, Elems dout, Elems x, MoeBlockState& st, const LayerWeights& w, int64_t N) {
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
  // The experts' down and gate|up projections, here or on the experts' ranks (whose weight
  // gradients then take 1/ep: params.h KEEL_PARAM_EXPERT).
  stack_expert_weights(w);
  if (!dispatch_) {
    experts_backward(s.dxperm, s.dexpert_out, st.xperm, st.gate_up, st.act, st.kept, w, 1.0f, s.dact, s.dgate_up,
                     &st);
  } else {
    ensure_ep_scratch(st.route.rows);
    dispatch_->to_experts(st.route, s.dexpert_out, ep_.rows_out, ep_.staging);
    experts_backward(ep_.drows, ep_.rows_out, st.local_x, st.gate_up, st.act, st.route.local_counts, w,
                     1.0f / float(dispatch_->size()), ep_.dact, ep_.dgate_up, nullptr);
    dispatch_->from_experts(st.route, ep_.drows, s.dxperm, ep_.staging);
  }
  if (st.dropped > 0) ops_.fill_zero(s.dxperm + (NK - st.dropped) * C_, st.dropped * C_);  // no expert saw them
  // The scatter's input gradient: each token's k pair gradients summed (dx overwritten here).
  KEEL_OP(be_, moe_unpermute_dt, dt, dx.get(), s.dxperm.get(), nullptr, st.positions, N, K, C_);
  // The router: the weights' gradient, plus the balancing losses', through the routing to the logits.
  KEEL_OP(be_, moe_route_backward, s.dlogits, s.dweights, st.logits, st.scores, st.experts,
          balancing_ ? expert_dscores_.floats() : nullptr, z_grad_, N, E, K, flags_);
  router_backward(dx, s.dlogits, x, w, router_, N, E_);
  if (S_ > 0) shared_backward(dx, dout, x, st, w, N);
}

void SparseMlp::experts_backward(Elems dx, Elems dout, Elems x, Elems gate_up, Elems act,
                                 const std::vector<int64_t>& counts, const LayerWeights& w, float grad_scale, Elems dact,
                                 Elems dgate_up, const MoeBlockState* pairs) {
  const keel_dtype dt = ops_.dtype();
  const int64_t rows = std::accumulate(counts.begin(), counts.end(), int64_t(0));
  const bool scaled = grad_scale != 1.0f;
  const ExpertDropout drop = expert_dropout(w, pairs);
  // Which weight gradients to form: none in an INPUT part, nor for frozen experts (a LoRA run's
  // that targets none of their modules; a module's target takes every expert's).
  bool train_gate_up = false, train_down = false;
  for (int32_t e = 0; e < El_ && w.training(); ++e) {
    train_gate_up = train_gate_up || w.grad(expert_slot(e, 0)) || w.grad(expert_slot(e, 1));
    train_down = train_down || w.grad(expert_slot(e, 2));
  }
  // The down projections' gradients go straight into their buffers, unless they take a scale
  // (expert parallelism): then through scratch, scaled, and added.
  const bool direct = !scaled;
  float* ddown_scratch = direct ? nullptr : ddown_memory_.floats();
  std::vector<const void*> gate_up_w(static_cast<size_t>(El_)), down_w(static_cast<size_t>(El_));
  std::vector<float*> dgate_up_w(static_cast<size_t>(El_)), ddown_w(static_cast<size_t>(El_));
  for (int32_t e = 0; e < El_; ++e) {
    gate_up_w[size_t(e)] = (experts_gate_up_ + e * 2 * Fe_ * C_).get();
    down_w[size_t(e)] = w.weight(expert_slot(e, 2)).get();
    dgate_up_w[size_t(e)] = dexperts_gate_up_ + e * 2 * Fe_ * C_;
    ddown_w[size_t(e)] = direct ? w.grad(expert_slot(e, 2)) : ddown_scratch + e * C_ * Fe_;
    if (train_down && !ddown_w[size_t(e)])
      throw std::logic_error("experts_backward: expert " + std::to_string(e) + "'s down projection has no gradient "
                             "where the others have");
  }
  if (train_down && !direct) KEEL_OP(be_, fill_zero, ddown_scratch, size_t(El_ * C_ * Fe_) * sizeof(float));
  ops_.fill_zero(dact, rows * Fe_);
  KEEL_OP(be_, grouped_matmul_backward_dt, dt, dact.get(), train_down ? ddown_w.data() : nullptr, dout.get(),
          act.get(), down_w.data(), counts.data(), int32_t(El_), Fe_, C_);
  if (drop.down) {  // dact += drop(dout·D); dD += doutᵀ·drop(act)
    const int64_t NK = pair_rows(*pairs);
    const std::vector<const void*> deltas = down_deltas(w);
    std::vector<float*> ddeltas(static_cast<size_t>(El_));
    for (int32_t e = 0; e < El_; ++e) ddeltas[size_t(e)] = w.delta_grad(expert_slot(e, 2));
    const uint64_t seed = w.seed(keel_support::kExpertHidden);
    if (w.training()) drop_expert_rows(drop_.dropped, act, *pairs, Fe_, seed, w.lora->dropout());  // dD's input alone
    ops_.fill_zero(drop_.product, NK * Fe_);
    KEEL_OP(be_, grouped_matmul_backward_dt, dt, drop_.product.get(), w.training() ? ddeltas.data() : nullptr,
            dout.get(), (w.training() ? drop_.dropped : act).get(), deltas.data(), counts.data(), int32_t(El_), Fe_, C_);
    drop_expert_rows(drop_.product, drop_.product, *pairs, Fe_, seed, w.lora->dropout());
    ops_.add(dact, dact, drop_.product, rows * Fe_);
  }
  ops_.fill_zero(dgate_up, rows * 2 * Fe_);
  ops_.swiglu_backward(dgate_up, dact, gate_up, rows, Fe_);
  ops_.fill_zero(dx, rows * C_);
  if (train_gate_up) KEEL_OP(be_, fill_zero, dexperts_gate_up_, size_t(El_ * 2 * Fe_ * C_) * sizeof(float));
  KEEL_OP(be_, grouped_matmul_backward_dt, dt, dx.get(), train_gate_up ? dgate_up_w.data() : nullptr, dgate_up.get(),
          x.get(), gate_up_w.data(), counts.data(), int32_t(El_), C_, 2 * Fe_);
  if (drop.gate_up) {  // dx += drop(dgate_up·D); dD += dgate_upᵀ·drop(x), split into gate's and up's
    const int64_t NK = pair_rows(*pairs);
    const std::vector<const void*> deltas = gate_up_deltas(w);
    std::vector<float*> ddeltas(static_cast<size_t>(El_));
    for (int32_t e = 0; e < El_; ++e) ddeltas[size_t(e)] = ddeltas_gate_up_ + e * 2 * Fe_ * C_;
    const uint64_t seed = w.seed(keel_support::kExpertInput);
    if (w.training()) {  // dD's input alone
      drop_expert_rows(drop_.dropped, x, *pairs, C_, seed, w.lora->dropout());
      KEEL_OP(be_, fill_zero, ddeltas_gate_up_, size_t(El_ * 2 * Fe_ * C_) * sizeof(float));
    }
    ops_.fill_zero(drop_.product, NK * C_);
    KEEL_OP(be_, grouped_matmul_backward_dt, dt, drop_.product.get(), w.training() ? ddeltas.data() : nullptr,
            dgate_up.get(), (w.training() ? drop_.dropped : x).get(), deltas.data(), counts.data(), int32_t(El_), C_,
            2 * Fe_);
    drop_expert_rows(drop_.product, drop_.product, *pairs, C_, seed, w.lora->dropout());
    ops_.add(dx, dx, drop_.product, rows * C_);
    for (int32_t e = 0; e < El_ && w.training(); ++e)
      for (int32_t part = 0; part < 2; ++part)
        if (float* to = w.delta_grad(expert_slot(e, part)))
          KEEL_OP(be_, accumulate, to, ddeltas_gate_up_ + (e * 2 + part) * Fe_ * C_, Fe_ * C_);
  }
  if (scaled && train_gate_up) KEEL_OP(be_, scale, dexperts_gate_up_, grad_scale, El_ * 2 * Fe_ * C_);
  if (scaled && train_down) KEEL_OP(be_, scale, ddown_scratch, grad_scale, El_ * C_ * Fe_);
  auto add = [&](int32_t slot, const float* from, int64_t n) {
    if (float* to = w.grad(slot)) KEEL_OP(be_, accumulate, to, from, n);
  };
  for (int32_t e = 0; e < El_; ++e) {
    if (train_gate_up) add(expert_slot(e, 0), dgate_up_w[size_t(e)], Fe_ * C_);
    if (train_gate_up) add(expert_slot(e, 1), dgate_up_w[size_t(e)] + Fe_ * C_, Fe_ * C_);
    if (train_down && !direct) add(expert_slot(e, 2), ddown_w[size_t(e)], C_ * Fe_);
  }
}

void SparseMlp::shared_backward(Elems dx, Elems dout, Elems x, MoeBlockState& st, const LayerWeights& w, int64_t N) {
  const keel_dtype dt = ops_.dtype();
  Scratch& s = scratch_;
  KEEL_OP(be_, moe_permute_dt, dt, s.dshared_out.get(), dout.get(), st.shared_gate, s.identity, N, 1, C_);
  KEEL_OP(be_, fill_zero, s.dshared_gate, size_t(N) * sizeof(float));
  KEEL_OP(be_, moe_unpermute_scale_backward_dt, dt, s.dshared_gate, dout.get(), st.shared_out.get(), s.identity, N, 1,
          C_);
  ops_.fill_zero(s.dshared_act, N * S_);
  ops_.matmul_backward(s.dshared_act, w.grad(shared_w_[2]), nullptr, s.dshared_out, st.shared_act,
                       w.weight(shared_w_[2]), N, S_, C_);
  if (w.dropping())
    w.lora->dropped_backward(s.dshared_act, w.training(), s.dshared_out, st.shared_act, N, S_,
                             {{size_t(shared_w_[2]), C_}}, w.seed(keel_support::kMlpHidden), 0);
  ops_.fill_zero(s.dshared_gate_up, N * 2 * S_);
  ops_.swiglu_backward(s.dshared_gate_up, s.dshared_act, st.shared_gate_up, N, S_);
  stack_shared_weights(w);
  const bool training = w.grad(shared_w_[0]) || w.grad(shared_w_[1]);  // a frozen shared expert forms none
  if (training) KEEL_OP(be_, fill_zero, dshared_stack_, size_t(2 * S_ * C_) * sizeof(float));
  ops_.matmul_backward(dx, training ? dshared_stack_ : nullptr, nullptr, s.dshared_gate_up, x, shared_stack_, N, C_,
                       2 * S_);
  for (int part = 0; part < 2 && training; ++part)
    if (float* to = w.grad(shared_w_[part])) KEEL_OP(be_, accumulate, to, dshared_stack_ + part * S_ * C_, S_ * C_);
  if (w.dropping())
    w.lora->dropped_backward(dx, w.training(), s.dshared_gate_up, x, N, C_, shared_gate_up_parts(),
                             w.seed(keel_support::kMlpInput), 0);
  KEEL_OP(be_, moe_route_backward, s.dshared_logit, s.dshared_gate, st.shared_gate_logit, st.shared_gate_score,
          st.shared_choice, nullptr, 0.0f, N, 1, 1, KEEL_ROUTE_SIGMOID);
  router_backward(dx, s.dshared_logit, x, w, shared_gate_, N, 1);
}

SparseMlp::ExpertDropout SparseMlp::expert_dropout(const LayerWeights& w, const MoeBlockState* pairs) {
  ExpertDropout drop;
  if (!w.dropping()) return drop;
  drop.gate_up = bool(w.delta(expert_slot(0, 0))) || bool(w.delta(expert_slot(0, 1)));
  drop.down = bool(w.delta(expert_slot(0, 2)));
  if ((drop.gate_up || drop.down) && !pairs)
    throw std::logic_error("SparseMlp: adapter dropout on experts at ep > 1 (the model refuses it at create)");
  if (drop.gate_up || drop.down) ensure_drop_scratch(pair_rows(*pairs));
  return drop;
}

// Rows in expert order go to pair order (moe_unpermute with one slot: row i ← positions[i]), take
// the mask there (row i is pair i = token·K + slot), and come back (moe_permute with one slot).
void SparseMlp::drop_expert_rows(Elems dst, Elems src, const MoeBlockState& st, int64_t cols, uint64_t seed, float p) {
  const keel_dtype dt = ops_.dtype();
  const int64_t NK = pair_rows(st);
  KEEL_OP(be_, moe_unpermute_dt, dt, drop_.in_pairs.get(), src.get(), nullptr, st.positions, NK, 1, cols);
  ops_.dropout(drop_.in_pairs, drop_.in_pairs, NK, cols, 0, seed, p);
  KEEL_OP(be_, moe_permute_dt, dt, dst.get(), drop_.in_pairs.get(), nullptr, st.positions, NK, 1, cols);
}

std::vector<const void*> SparseMlp::gate_up_deltas(const LayerWeights& w) {
  if (!delta_memory_.get()) {
    auto carve_all = [&](char* base) {
      Carver carve(base);
      deltas_gate_up_ = ops_.at(carve.take<char>(int64_t(ops_.bytes(El_ * 2 * Fe_ * C_))));
      ddeltas_gate_up_ = carve.take<float>(El_ * 2 * Fe_ * C_);
      return carve.used();
    };
    delta_memory_ = be_.alloc_bytes(carve_all(nullptr));
    carve_all(static_cast<char*>(delta_memory_.get()));
  }
  std::vector<const void*> out(static_cast<size_t>(El_));
  for (int32_t e = 0; e < El_; ++e) {
    const Elems stacked = deltas_gate_up_ + e * 2 * Fe_ * C_;
    for (int32_t part = 0; part < 2; ++part) {
      const Elems d = w.delta(expert_slot(e, part));
      if (d) ops_.copy(stacked + part * Fe_ * C_, d, Fe_ * C_);
      else ops_.fill_zero(stacked + part * Fe_ * C_, Fe_ * C_);
    }
    out[size_t(e)] = stacked.get();
  }
  return out;
}

std::vector<const void*> SparseMlp::down_deltas(const LayerWeights& w) const {
  std::vector<const void*> out(static_cast<size_t>(El_));
  for (int32_t e = 0; e < El_; ++e) out[size_t(e)] = w.delta(expert_slot(e, 2)).get();
  return out;
}

void SparseMlp::ensure_drop_scratch(int64_t pairs) {
  if (pairs <= drop_.pairs && drop_.pairs > 0) return;
  const int64_t capacity = std::max<int64_t>(pairs, 1);
  auto carve_all = [&](char* base) {
    Carver carve(base);
    auto elems = [&](int64_t n) { return ops_.at(carve.take<char>(int64_t(ops_.bytes(n)))); };
    drop_.in_pairs = elems(capacity * std::max(C_, Fe_));
    drop_.dropped = elems(capacity * std::max(C_, Fe_));
    drop_.product = elems(capacity * std::max(2 * Fe_, C_));
    return carve.used();
  };
  drop_.memory = keel_support::BackendBuffer();
  drop_.memory = be_.alloc_bytes(carve_all(nullptr));
  carve_all(static_cast<char*>(drop_.memory.get()));
  drop_.pairs = capacity;
}

}  // namespace keel_llama
