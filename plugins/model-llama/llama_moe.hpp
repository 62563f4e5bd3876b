// The llama model's sparse MLP (mixture of experts, issue 42) as transformers' MixtralSparseMoeBlock
// and Qwen2MoeSparseMoeBlock compute it: a router matmul, top-k routing, the tokens permuted into
// expert order, each expert's SwiGLU as two grouped matmuls, the outputs gathered back weighted by
// the routing weights, and Qwen2-MoE's shared expert (a dense SwiGLU scaled by a sigmoid gate).
// Dropless: every token reaches its k experts. The balancing losses enter the backward only (their
// gradients into the router's scores and logits); the logged loss stays the cross-entropy.
// Expert parallelism (parallel.ep > 1): this rank holds E/ep of each layer's experts, and the
// rows routed to the others travel there and back (llama_moe_dispatch.hpp); their gradients are
// scaled by 1/ep (params.h KEEL_PARAM_EXPERT). LlamaModel refuses tp with experts, and the balancing
// loss at pp > 1 (the z-loss and loss-free balancing run per stage). Under bf16 the router's logits
// are converted to fp32 for routing, as transformers routes in fp32.
// A sparse layer's tensors: the decoder layer's first six (norms and attention), then the shared
// expert's gate, up, down (Qwen2-MoE only, in the dense MLP's slots), the attention biases (Qwen2-MoE),
// then the router, the shared expert's gate (Qwen2-MoE) and each expert's gate (w1), up (w3), down (w2).
#pragma once

#include <keel/backend.h>
#include <keel/host.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <keel_support/common/backend_buffer.hpp>  // defines: BackendBuffer
#include <keel_support/model/carver.hpp>          // defines: Carver
#include <keel_support/model/compute_ops.hpp>     // defines: ComputeOps, Elems
#include <keel_support/model/layer_lease.hpp>     // defines: LayerLease
#include <keel_support/model/lora.hpp>            // defines: LoraLayer
#include <keel_support/model/qat.hpp>             // defines: QatLayer
#include "llama_config.hpp"                       // defines: LlamaConfig, MoeConfig
#include "llama_moe_balance.hpp"                  // defines: ExpertBias
#include "llama_moe_dispatch.hpp"                 // defines: ExpertDispatch, ExpertRoute
#include "llama_moe_metrics.hpp"                  // defines: BalanceTally

namespace keel_llama {

using keel_support::ComputeOps;
using keel_support::Elems;

// One sparse block's forward tensors of one micro-batch that its backward reads.
struct MoeBlockState {
  int64_t block = 0;             // the model's block index (for the load log)
  float* logits = nullptr;       // (N,E) router logits
  float* scores = nullptr;       // (N,E) softmax (or sigmoid) of the logits
  float* weights = nullptr;      // (N,K) the chosen experts' weights
  int32_t* experts = nullptr;    // (N,K) the chosen experts, largest score first
  int32_t* positions = nullptr;  // (N,K) each (token, slot) pair's row in expert order
  std::vector<int64_t> counts;   // (E) host: pairs routed to each expert
  // With a capacity factor: the pairs each expert takes (E, host; the rows of xperm in that order
  // come first, the dropped ones after them) and how many were dropped. Without: counts, 0.
  std::vector<int64_t> kept;
  int64_t dropped = 0;
  Elems xperm;                   // (NK,C) the normed rows in expert order
  // The rows this rank's experts work on, in local-expert order: xperm itself (R = NK) at ep 1; at
  // ep > 1 the R = route.rows rows received from the block (local_memory, grown as needed).
  Elems local_x;                 // (R,C)
  Elems gate_up;                 // (R,2Fe) each row's gate and up projections side by side
  Elems act;                     // (R,Fe) silu(gate)·up
  ExpertRoute route;             // ep > 1: where this micro-batch's rows went
  keel_support::BackendBuffer local_memory;
  int64_t local_capacity = 0;    // rows local_memory holds
  Elems expert_out;              // (NK,C) each pair's expert output before its weight
  Elems shared_gate_up;          // (N,2S) the shared expert's (Qwen2-MoE)
  Elems shared_act;              // (N,S)
  Elems shared_out;              // (N,C)
  float* shared_gate_logit = nullptr;  // (N) shared_expert_gate's output
  float* shared_gate_score = nullptr;  // (N) its sigmoid (moe_route's scores, E = 1)
  float* shared_gate = nullptr;        // (N) the same sigmoid, as moe_route's weights
  int32_t* shared_choice = nullptr;    // (N) moe_route's expert output for E = 1: all zero
};

// A micro-batch's sparse-block states, indexed by the chunk's block; dense blocks' stay empty.
struct MoeState {
  int64_t rows = 0;
  keel_support::BackendBuffer memory;
  std::unique_ptr<MoeBlockState[]> blocks;
};

// A sparse layer's tensors after the decoder layer's common ones, by name and (rows, cols).
struct MoeTensor {
  std::string name;
  int64_t rows, cols;
  bool expert = false;  // one routed expert's (params.h KEEL_PARAM_EXPERT)
};

// The weights a sparse layer computes with and where their gradients go: the lease's, a LoRA
// target's merged weight and its dW scratch, or a QAT target's fake-quantized weight (the block in
// use's LoraLayer and QatLayer; the gradient of a QAT target goes to the weight itself). Under
// LoRA's dropout the targets compute with the base and the adapters' D = s·B·A is added from each
// input's dropped copy (delta, delta_grad; the masks' seeds from the micro-batch's and the block).
struct LayerWeights {
  const keel_support::LayerLease& lease;
  const keel_support::LayerLease* grads = nullptr;  // nullptr: no weight gradients in this pass
  keel_support::LoraLayer* lora = nullptr;          // nullptr: no adapters
  const keel_support::QatLayer* qat = nullptr;      // nullptr: no fake quantization
  uint64_t dropout_seed = 0;                        // the micro-batch's (model.h); 0: no dropout
  int64_t block = 0;                                // the model's block index
  bool dropping() const { return lora && lora->dropping(); }
  Elems delta(int32_t index) const { return dropping() ? lora->delta(size_t(index)) : Elems(); }
  float* delta_grad(int32_t index) const { return dropping() && grads ? lora->delta_grad(size_t(index)) : nullptr; }
  uint64_t seed(keel_support::LoraInput input) const {
    return keel_support::dropout_site_seed(dropout_seed, block, input);
  }
  Elems weight(int32_t index) const {
    if (lora && lora->merges(size_t(index))) return lora->weight(lease, size_t(index));
    const Elems own = lease.param_elems(size_t(index));
    return qat ? qat->weight(size_t(index), own) : own;
  }
  // nullptr: none (no gradients in this pass, or a frozen tensor that is no target)
  float* grad(int32_t index) const {
    return lora ? lora->grad(grads, size_t(index)) : grads ? grads->grad(size_t(index)) : nullptr;
  }
  bool training() const { return grads != nullptr; }
};

class SparseMlp {
 public:
  // `first_slot`: the router's index among a sparse layer's tensors. `dispatch`: the expert-parallel
  // exchange at ep > 1, nullptr when every expert is on this rank. `held_sparse_blocks`: the sparse
  // blocks of this rank's pipeline chunks, in order.
  SparseMlp(const keel_host* host, const LlamaConfig& config, const keel_support::BackendOps& backend,
            const ComputeOps& ops, int32_t first_slot, int32_t shared_gate_w, int32_t shared_up_w, int32_t shared_down_w,
            std::unique_ptr<ExpertDispatch> dispatch, std::vector<int64_t> held_sparse_blocks);

  // The shared expert's tensors (they take the dense MLP's three slots) and the tensors after the
  // attention biases, under transformers' names; `prefix` is "model.layers.N.".
  std::vector<MoeTensor> shared_expert_tensors(const std::string& prefix) const;
  std::vector<MoeTensor> routed_tensors(const std::string& prefix) const;
  int64_t local_experts() const { return El_; }
  // Loss-free balancing's biases (model.h 0.19 rule-moved state); nullptr when it is off.
  keel_support::RuleState* rule_state() { return bias_.get(); }

  // Sizes `state` for N rows of `blocks` blocks (chunk-local index l is block first_block + l).
  void ensure_state(MoeState& state, int64_t N, int64_t first_block, int64_t blocks) const;

  // out(N,C) = the sparse MLP of x(N,C), overwritten.
  void forward(MoeBlockState& st, Elems out, Elems x, const LayerWeights& w, int64_t N);
  // Before a micro-batch's sparse backwards: the balancing losses' gradients from every sparse
  // block's routing of that micro-batch (transformers' formula over all layers' router rows).
  void begin_backward(const MoeState& state, int64_t first_block, int64_t blocks, int64_t N, float loss_scale);
  // dx(N,C) = d loss/d x, overwritten, from dout(N,C); when w is training, the weight gradients
  // too (+=, where w has a place for them).
  void backward(Elems dx, Elems dout, Elems x, MoeBlockState& st, const LayerWeights& w, int64_t N);
  // The balancing figures of the micro-batches begun since the last call (step_metrics).
  const std::vector<keel_support::StepMetric>& take_step_metrics() { return tally_.take(); }

 private:
  // Local expert e's tensor (0 w1/gate, 1 w3/up, 2 w2/down).
  int32_t expert_slot(int32_t e, int32_t which) const { return expert_first_ + 3 * e + which; }
  // The local experts' SwiGLU on R rows in local-expert order (`counts` per local expert), out (R,C).
  // `pairs`: at ep 1 the block's permuted (token, slot) pairs, which LoRA's dropout keys its
  // masks by (nullptr at ep > 1, where the model refuses dropout on the experts).
  void experts_forward(Elems x, Elems gate_up, Elems act, Elems out, const std::vector<int64_t>& counts,
                       const LayerWeights& w, const MoeBlockState* pairs);
  // Its backward from dout (R,C): dx (R,C) overwritten; when w is training each local expert's
  // weight gradients, times grad_scale, added. dact and dgate_up are scratch of R rows.
  void experts_backward(Elems dx, Elems dout, Elems x, Elems gate_up, Elems act, const std::vector<int64_t>& counts,
                        const LayerWeights& w, float grad_scale, Elems dact, Elems dgate_up,
                        const MoeBlockState* pairs);
  // LoRA's dropout on the routed experts: which of gate|up and down have adapters (every expert's
  // alike: a module's target takes them all), checked against `pairs` (ep 1 only).
  struct ExpertDropout {
    bool gate_up = false, down = false;
  };
  ExpertDropout expert_dropout(const LayerWeights& w, const MoeBlockState* pairs);
  // dst = src (NK rows of `cols` in expert order) with the mask of `seed` keyed by each row's
  // (token, slot) pair: through pair order and back (dst may be src).
  void drop_expert_rows(Elems dst, Elems src, const MoeBlockState& st, int64_t cols, uint64_t seed, float p);
  // The local experts' D pointers: gate|up stacked (zero rows for a module without adapters) and down.
  std::vector<const void*> gate_up_deltas(const LayerWeights& w);
  std::vector<const void*> down_deltas(const LayerWeights& w) const;
  void ensure_drop_scratch(int64_t pairs);
  void ensure_local(MoeBlockState& st, int64_t rows) const;
  // Rewrites st.positions so each expert's first pairs (by token, then slot) up to its capacity
  // come first in expert order and the rest after them; sets st.kept and st.dropped.
  void apply_capacity(MoeBlockState& st, int64_t N);
  void ensure_ep_scratch(int64_t rows);
  void stack_expert_weights(const LayerWeights& w);
  void stack_shared_weights(const LayerWeights& w);
  void ensure_scratch(int64_t N);
  // A router's product x(N,C)·w(OC,C)ᵀ as fp32 logits (moe_route reads fp32), and its backward
  // from fp32 dlogits; under bf16 through a compute-type copy, converted.
  // `slot`: the router's tensor; under LoRA's dropout its adapters read the MLP input's mask.
  void router_forward(float* logits, Elems x, const LayerWeights& w, int32_t slot, int64_t N, int64_t OC);
  void router_backward(Elems dx, float* dlogits, Elems x, const LayerWeights& w, int32_t slot, int64_t N, int64_t OC);
  void carve_block(MoeBlockState& st, keel_support::Carver& carve, int64_t N) const;
  void shared_forward(MoeBlockState& st, Elems out, Elems x, const LayerWeights& w, int64_t N);
  void shared_backward(Elems dx, Elems dout, Elems x, MoeBlockState& st, const LayerWeights& w, int64_t N);
  // The shared expert's gate and up as LoRA's dropped input sees them, stacked.
  std::vector<keel_support::LoraLayer::Part> shared_gate_up_parts() const {
    return {{size_t(shared_w_[0]), S_}, {size_t(shared_w_[1]), S_}};
  }

  const keel_host* host_;
  keel_support::BackendOps be_;
  ComputeOps ops_;
  MoeConfig moe_;
  bool qwen2_;  // Qwen2-MoE's names (attention_bias), else Mixtral's
  int64_t C_, E_, K_, Fe_, S_;
  std::unique_ptr<ExpertDispatch> dispatch_;  // nullptr: every expert on this rank (ep 1)
  int64_t El_;                                // experts on this rank (E / ep)
  std::unique_ptr<ExpertBias> bias_;          // loss-free balancing; nullptr: off
  int64_t model_sparse_blocks_ = 0;           // sparse layers of the whole model, every stage's
  int32_t flags_;
  int32_t router_, shared_gate_, expert_first_;  // slots; shared_gate_ -1: none
  int32_t shared_w_[3];                           // the shared expert's gate, up, down slots
  // One layer's stacked gate|up per expert and the shared expert's, and their fp32 gradients.
  keel_support::BackendBuffer stacked_memory_;
  Elems experts_gate_up_;       // (E,2Fe,C)
  float* dexperts_gate_up_;     // (E,2Fe,C)
  Elems shared_stack_;          // (2S,C)
  float* dshared_stack_;        // (2S,C)
  // Backward scratch, one block at a time, sized for the most rows seen.
  struct Scratch {
    int64_t rows = 0;
    keel_support::BackendBuffer memory;
    float* dweights;       // (N,K)
    float* dlogits;        // (N,E)
    Elems dexpert_out;     // (NK,C)
    Elems dact;            // (NK,Fe)
    Elems dgate_up;        // (NK,2Fe)
    Elems dxperm;          // (NK,C)
    Elems shared_part;     // (N,C) the shared expert's weighted output
    Elems dshared_out;     // (N,C)
    Elems dshared_act;     // (N,S)
    Elems dshared_gate_up; // (N,2S)
    float* dshared_gate;   // (N)
    float* dshared_logit;  // (N)
    int32_t* identity;     // (N) 0..N-1: moe_unpermute as a per-row scale
    Elems router_dt;       // (N,E) a router's logits or their gradient at the compute type (bf16 only)
  } scratch_;
  // ep > 1: the exchange's staging and the local rows' backward scratch, sized for the most rows
  // received; the down projections' gradients before their 1/ep scale.
  struct EpScratch {
    int64_t rows = 0;
    keel_support::BackendBuffer memory;
    Elems staging;   // (R,C) rows in the order they travel
    Elems rows_out;  // (R,C) the local experts' output, or its gradient
    Elems drows;     // (R,C) the gradient of the rows received
    Elems dact;      // (R,Fe)
    Elems dgate_up;  // (R,2Fe)
  } ep_;
  // LoRA's dropout on the routed experts, sized for the most pairs seen: a block's rows in pair
  // order, their dropped copy in expert order, a grouped product; the stacked gate|up D and dD.
  struct DropScratch {
    int64_t pairs = 0;
    keel_support::BackendBuffer memory;
    Elems in_pairs;  // (NK, max(C,Fe))
    Elems dropped;   // (NK, max(C,Fe))
    Elems product;   // (NK, max(2Fe,C))
  } drop_;
  keel_support::BackendBuffer delta_memory_;
  Elems deltas_gate_up_;              // (El,2Fe,C)
  float* ddeltas_gate_up_ = nullptr;  // (El,2Fe,C) fp32
  keel_support::BackendBuffer ddown_memory_;   // (El,C,Fe) fp32, ep > 1 only
  keel_support::BackendBuffer expert_dscores_;  // (E) the balancing loss's gradient per expert's score
  std::vector<float> expert_dscores_host_;
  bool balancing_ = false;
  float z_grad_ = 0.0f;
  BalanceTally tally_{E_};
  std::vector<float> scores_host_;  // one layer's router scores, for the tally
};

}  // namespace keel_llama
