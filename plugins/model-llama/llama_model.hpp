// The Llama family (Llama 2/3, SmolLM, Qwen2 and Qwen2.5, Mistral without sliding windows) as
// transformers' LlamaForCausalLM computes it, written against the backend op set: RMSNorm,
// rotary position embedding (rotate-half), grouped-query attention, a SwiGLU MLP, optional biases
// (q, k, v as Qwen2's attention; gate, up, down as LlamaConfig.mlp_bias), and an output head tied
// to the embedding or its own. The model owns activations only; parameters
// and their gradients come one layer at a time from the strategy's keel_param_access.
// Layers (units of acquire/release): 0 = model.embed_tokens (also the output head when tied),
// 1..n_layer = decoder layers, n_layer+1 = model.norm (and lm_head when untied).
// Parameters carry Hugging Face's names and layouts, one tensor per projection, so export and
// import move bytes without reshaping and every tensor-parallel piece is a box. Each block
// stacks its q, k, v weights (and gate, up) into one scratch matrix per use, so one matmul writes
// the packed rows the attention (and SwiGLU) ops read (keel_support::StackedLinear).
// Tensor parallelism (Megatron): query and key/value heads split over tp (n_kv_head must be a
// multiple of tp: kv heads are split, never replicated), the MLP's hidden units too, the
// vocabulary of the embedding and head with a vocabulary-parallel cross-entropy; sequence
// parallelism holds 1/tp of the token rows in the norm and residual regions. keel_support's
// tp_regions.hpp is all the communication, chunk_plan.hpp the pipeline cut.
#pragma once

#include <keel/model.h>
#include <keel/plugin.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <keel_support/model/activation_cache.hpp>  // defines: ActivationCache
#include <keel_support/common/backend_ops.hpp>     // defines: BackendOps, KEEL_OP
#include <keel_support/model/chunk_calls.hpp>     // defines: read_forward_call, read_backward_call
#include <keel_support/model/carver.hpp>          // defines: Carver
#include <keel_support/model/chunk_plan.hpp>      // defines: ChunkPlan
#include <keel_support/model/compute_ops.hpp>     // defines: ComputeOps, Elems
#include <keel_support/model/layer_lease.hpp>     // defines: LayerLease
#include <keel_support/model/layer_specs.hpp>     // defines: LayerSpecs, NamedSpec, split_for_tp
#include <keel_support/model/model_support.hpp>   // defines: make_spec, check_token_ids
#include <keel_support/model/recompute.hpp>       // defines: Recompute
#include <keel_support/model/ring_attention.hpp>  // defines: RingAttention, context_group
#include <keel_support/model/stacked_linear.hpp>  // defines: StackedLinear
#include <keel_support/model/tp_regions.hpp>      // defines: TpRegions, VocabShard, InferenceLogits
#include "llama_config.hpp"                 // defines: LlamaConfig
#include "llama_external.hpp"               // defines: llama_external_names
#include "llama_moe.hpp"                    // defines: SparseMlp, MoeState

namespace keel_llama {

using keel_support::BackendBuffer;
using keel_support::BackendOps;
using keel_support::ChunkPlan;
using keel_support::ComputeOps;
using keel_support::Elems;
using keel_support::LayerLease;
using keel_support::Recompute;
using keel_support::StackedLinear;
using keel_support::TpRegions;

// Each tensor of a decoder layer. The weights are the layer's specs 0..DOWN_W in this order; the
// biases config asks for follow them, at block_slot_[tensor] (-1: none).
enum BlockTensor { IN_NORM, Q_W, K_W, V_W, O_W, POST_NORM, GATE_W, UP_W, DOWN_W,
                   Q_B, K_B, V_B, GATE_B, UP_B, DOWN_B, BLOCK_TENSORS };
enum EmbeddingTensor { EMBED };
enum FinalTensor { FINAL_NORM, LM_HEAD };

// This rank's share of the model under tensor parallelism (everything whole at tp 1).
struct TpShape {
  int64_t heads = 0;      // NH/tp query heads
  int64_t kv_heads = 0;   // NKV/tp key/value heads
  int64_t q_width = 0;    // heads·head_dim: o_proj's input columns
  int64_t kv_width = 0;   // kv_heads·head_dim
  int64_t qkv_width = 0;  // q_width + 2·kv_width: a packed qkv row
  int64_t hidden = 0;     // ffn_hidden/tp
  keel_support::VocabShard vocab;
};

// One block's forward tensors that its backward reads: views into a micro-batch's Activations,
// or, for what recomputation drops, into the recompute scratch.
struct BlockActivations {
  Elems ln1;        // (N,C) input_layernorm's output, every row
  float* ln1_rstd;  // (Nr)
  Elems qkv;        // (N,QKV) q, k, v packed, q and k turned by rope
  Elems atty;       // (N,Cq) attention output before o_proj
  char* att_saved;  // attention_gqa_saved_bytes
  Elems residual2;  // (Nr,C)
  Elems ln2;        // (N,C)
  float* ln2_rstd;  // (Nr)
  Elems gate_up;    // (N,2F) gate and up projections side by side
  Elems act;        // (N,F) silu(gate)·up
  MoeBlockState* moe = nullptr;  // a sparse block's routing state (llama_moe.hpp); nullptr: a dense MLP
  const int32_t* positions = nullptr;  // (N) a packed batch's positions; nullptr: one sequence per row
  int64_t block = 0;                   // the model's block index (its dropout masks' key)
  uint64_t dropout_seed = 0;           // the micro-batch's (model.h); 0: no dropout
};

// What the WEIGHT part of a split backward (zero-bubble schedules) reads: the gradient of each
// matmul's output (and of each norm's output on this rank's rows), kept by the INPUT part.
struct SavedOutputGrads {
  BackendBuffer memory;
  Elems down;     // (L,N,C)
  Elems gate_up;  // (L,N,2F)
  Elems ln2;      // (L,Nr,C)
  Elems o;        // (L,N,C)
  Elems qkv;      // (L,N,QKV) before rope's backward turned it: the gradient of the matmul's output
  Elems ln1;      // (L,Nr,C)
  Elems logits;   // (N,Vl) last chunk
  Elems lnf;      // (Nr,C) last chunk
  Elems encoded;  // (Nr,C) chunk 0
};

// One micro-batch's saved forward state of one chunk in one backend allocation; L is the chunk's
// block count. Recomputation leaves out what it drops (gpt_model.hpp has the same scheme).
struct Activations {
  int32_t B = 0, T = 0;
  int32_t chunk = 0;
  int32_t blocks = 0;
  bool head = false;
  BackendBuffer memory;
  Elems encoded;     // (Nr,C) the embedding (chunk 0) or the previous chunk's output
  Elems ln1;         // (L,N,C)
  float* ln1_rstd;   // (L,Nr)
  Elems qkv;         // (L,N,QKV)
  Elems atty;        // (L,N,Cq)
  char* att_saved;   // (L, att_saved_per_layer): the op's saved state, or lse under packing
  int32_t* positions;  // (N) a packed batch's positions, restarting per document
  Elems residual2;   // (L,Nr,C)
  Elems ln2;         // (L,N,C)
  float* ln2_rstd;   // (L,Nr)
  Elems gate_up;     // (L,N,2F)
  Elems act;         // (L,N,F)
  Elems residual3;   // (L,Nr,C) each block's output
  Elems lnf;         // (N,C)
  float* lnf_rstd;   // (Nr)
  Elems logits;      // (N,Vl)
  float* lse;        // (N)
  float* ce_stats;   // TpRegions::ce_stats_floats(N)
  float* loss_sum;   // 1
  int32_t* tokens;   // (N)
  int32_t* targets;  // (N)
  int64_t att_saved_per_layer = 0;
  int64_t valid_targets = 0;
  MoeState moe;      // the sparse blocks' routing state (config moe.n_experts > 0)
  bool backward_pending = false;
  bool packed = false;  // this micro-batch's forward had positions
  uint64_t dropout_seed = 0;  // its forward's (model.h 0.19); the backward and recomputation draw the same masks
  bool weight_pending = false;
  SavedOutputGrads saved;
};

// Activation gradients and per-use scratch, shared by all micro-batches (one backward runs at a
// time), sized for the largest B*T seen.
struct Scratch {
  int64_t rows = 0;
  BackendBuffer memory;
  Elems dresidual;  // (Nr,C)
  Elems dln;        // (N,C)
  Elems datty;      // (N,Cq)
  Elems dqkv;       // (N,QKV)
  Elems dact;       // (N,F)
  Elems dgate_up;   // (N,2F)
  Elems ln_rows;    // (Nr,C) sequence parallel: a norm's output before the all-gather
  Elems partial;    // (N,C) tensor parallel: a row-parallel matmul's partial sums
  Elems dln_rows;   // (Nr,C) sequence parallel
  Elems dgathered;  // (N,C) sequence parallel
  float* dnorm;     // (C) a norm weight's gradient from this rank's rows
};

// One tensor of a stacked projection (q|k|v, gate|up): its weight, and its bias when the config has them.
struct StackedPart {
  BlockTensor weight, bias;
};

class LlamaModel {
 public:
  static constexpr const char* kSource = "model llama";
  static void validate_config(const char* config_json, const char* json_path) {
    parse_llama_config(config_json, json_path);
  }
  static std::string complete_config(const std::string& format, const char* external_json, const char* config_json,
                                     const char* json_path) {
    return complete_llama_config(format, external_json, config_json, json_path);
  }
  LlamaModel(const keel_host* host, const keel_model_create_args& args);

  const keel_host* host() const { return host_; }
  void describe(keel_model_info* out) const;
  double flops_per_token(int32_t seq_len) const;
  void forward(keel_forward_args* args);
  void backward(const keel_backward_args& args);
  int64_t stage_io_numel(int32_t B, int32_t T) const { return tp_.norm_rows(int64_t(B) * T) * config_.d_model; }
  // Not with experts: the sparse MLP's weight gradients have no WEIGHT part of their own yet.
  bool splits_backward() const { return !sparse_; }
  // The sparse MLPs' balancing figures of the step (llama_moe_metrics.hpp); none without experts.
  const std::vector<keel_support::StepMetric>& step_metrics() {
    static const std::vector<keel_support::StepMetric> none;
    return sparse_ ? sparse_->take_step_metrics() : none;
  }
  // Loss-free balancing's per-expert biases (llama_moe_balance.hpp); nullptr without them.
  keel_support::RuleState* rule_state() { return sparse_ ? sparse_->rule_state() : nullptr; }
  const keel_support::ExternalNames& external() const { return *external_; }

 private:
  void check_tensor_parallel(const keel_model_create_args& args);
  // The context-parallel group (model.h 0.19 cp_*), and the ring's view of a block's rows.
  void connect_context_parallel(const keel_model_create_args& args);
  keel_support::RingAttention::Shape ring_shape(int64_t B, int64_t T) const;
  // With experts: the layouts and backends they cannot run on yet refused by name (llama_moe_model.cpp).
  void create_sparse_mlp(const keel_model_create_args& args);
  void build_param_specs();
  // A layer's adapters, after its other tensors; returns the targets (the same in every layer of a kind).
  std::vector<keel_support::LoraTarget> add_lora_specs(std::vector<keel_support::NamedSpec>& pending, int32_t layer);
  // The weight a block computes with (a LoRA target's merged one, a QAT target's fake-quantized
  // one) and where its gradient goes (a target's dW scratch; NULL for a frozen tensor, or with
  // `grads` NULL).
  Elems weight(const LayerLease& lease, BlockTensor t) const {
    return lora_->merges(size_t(t)) ? lora_->weight(lease, size_t(t))
                                    : qat_->weight(size_t(t), lease.param_elems(size_t(t)));
  }
  // A layer use's effective weights, before any is read: QAT's fake quantization, then LoRA's
  // adapters added to the (quantized) base, as torchtune's QAT with LoRA computes. `block`: the
  // model's block index (a sparse block has its own adapters: its experts'). `dropout_seed`: the
  // micro-batch's; with LoRA's dropout the targets compute with their base and the block adds the
  // adapters at each input (lora_->add_dropped).
  void prepare_weights(const LayerLease& lease, int64_t block, uint64_t dropout_seed = 0) {
    const int kind = sparse_block(block) ? 1 : 0;
    lora_ = &lora_layers_[kind];
    qat_ = &qat_layers_[kind];
    if (qat_->active()) qat_->apply([&](size_t index) { return lease.param_elems(index); });
    if (lora_->active())
      lora_->merge(lease, [&](size_t index) { return qat_->weight(index, lease.param_elems(index)); }, dropout_seed);
  }
  // q, k and v's parts of the stacked projection, for LoRA's dropout on their shared input.
  std::vector<keel_support::LoraLayer::Part> qkv_parts() const {
    return {{Q_W, share_.q_width}, {K_W, share_.kv_width}, {V_W, share_.kv_width}};
  }
  // An input's dropout mask seed in block v.block (keel_support::LoraInput).
  uint64_t input_seed(const BlockActivations& v, keel_support::LoraInput input) const {
    return keel_support::dropout_site_seed(v.dropout_seed, v.block, input);
  }
  bool sparse_block(int64_t block) const { return sparse_ && config_.moe.sparse(block); }
  void create_qat();
  float* weight_grad(const LayerLease* grads, BlockTensor t) const { return lora_->grad(grads, size_t(t)); }
  // o_proj's input, attention's output (N rows): under QAT's activations its fake-quantized copy
  // (forward, and the weight gradient's input in the backward), else itself.
  Elems o_input(Elems atty, int64_t N) {
    return config_.qat.quantizes_input("o_proj") ? qat_->quantized_input(atty, N, share_.q_width) : atty;
  }
  using ActivationKey = keel_support::ActivationCache<Activations>::Key;
  Activations& activations_for(int32_t microbatch, int32_t chunk, int32_t B, int32_t T);
  void carve_activations(Activations& a, char* base, size_t* out_bytes) const;
  void ensure_scratch(int64_t rows);
  void ensure_recompute_scratch(int64_t B, int64_t T);
  BlockActivations block_activations(const Activations& a, int64_t l) const;
  int64_t att_saved_bytes(int64_t B, int64_t T) const;
  // Rotary embedding of q and k, and attention of one block's qkv into `out`: per document with
  // the 0.19 ops when the batch is packed (v.positions), else the 0.9 ops over whole rows.
  void turn_qk(const BlockActivations& v, int64_t B, int64_t T) const;
  void attend(const BlockActivations& v, Elems out, int64_t B, int64_t T) const;
  void attend_backward(const BlockActivations& v, Elems dqkv, Elems datty, int64_t B, int64_t T) const;
  void turn_qk_backward(const BlockActivations& v, Elems dqkv, int64_t B, int64_t T) const;

  void embedding_forward(Activations& a, const keel_param_access* access);
  void block_forward(Activations& a, int64_t l, const keel_param_access* access);
  // The block's ops from its input into v; with `residual3` empty (a recomputation) it stops after
  // SwiGLU, the last tensor a backward reads.
  void block_forward_ops(const BlockActivations& v, Elems residual, Elems residual3, const LayerLease& lease,
                         int64_t B, int64_t T);
  void recompute_block(const BlockActivations& v, Elems residual, const LayerLease& lease, int64_t B, int64_t T,
                       bool for_input);
  float head_forward(Activations& a, const keel_param_access* access, bool training, int64_t valid_targets,
                     const float** out_logits, float* loss_sum, float loss_weight);

  void head_backward(Activations& a, const keel_param_access* access, float loss_scale, SavedOutputGrads* save);
  void block_backward(Activations& a, int64_t l, const keel_param_access* access, SavedOutputGrads* save);
  void embedding_backward(Activations& a, const keel_param_access* access, Elems dencoded_rows);
  void weight_backward(const keel_backward_args& args, int32_t chunk);
  void head_weight_backward(Activations& a, const keel_param_access* access);
  void block_weight_backward(Activations& a, int64_t l, const keel_param_access* access);
  SavedOutputGrads& saved_output_grads(Activations& a);

  // Stacks the layer's q, k, v (and gate, up) weights into qkv_ (gate_up_) for one matmul each.
  // `mlp` false: a sparse block, whose experts SparseMlp stacks.
  void stack_weights(const LayerLease& lease, bool mlp);
  // A stacked projection's backward: dinp += dout · W (when dinp is given) and, when `grads` is
  // given, each part's weight gradient (and bias gradient, with the config's biases) into its buffer.
  void stacked_backward(StackedLinear& stacked, Elems dinp, Elems dout, Elems inp, int64_t N,
                        const LayerLease* grads, std::initializer_list<StackedPart> parts);
  // A bias of the layer, or an empty view / NULL when the config has none (or, for the gradient,
  // `grads` is NULL: a split backward's INPUT part).
  Elems bias_of(const LayerLease& lease, BlockTensor t) const {
    return block_slot_[t] < 0 ? Elems() : lease.param_elems(size_t(block_slot_[t]));
  }
  float* bias_grad(const LayerLease* grads, BlockTensor t) const {
    return grads && block_slot_[t] >= 0 ? grads->grad(size_t(block_slot_[t])) : nullptr;
  }
  // A row-parallel projection's replicated bias is added by tp rank 0 only, before the sum over tp.
  Elems bias_once(Elems bias) const { return tp_.rank() == 0 ? bias : Elems(); }
  // rmsnorm_backward whose weight gradient reaches every tp rank whole (summed over tp under
  // sequence parallelism); dweight NULL: the input gradient only.
  void norm_backward(Elems dinp, float* dweight, Elems dout, Elems inp, Elems weight, const float* rstd,
                     int64_t rows);
  // The lm_head's weight: layer 0's embedding when tied, else layer n_layer+1's own.
  bool tied() const { return config_.tie_embeddings; }
  const keel_param_spec* layer_specs(int32_t layer) const { return specs_.layer(layer); }
  size_t layer_size(int32_t layer) const { return specs_.layer_size(layer); }

  const keel_host* host_;
  BackendOps backend_;
  ComputeOps ops_;
  LlamaConfig config_;
  ChunkPlan plan_;
  // Context parallelism (model.h cp_size > 1): attention through the ring of key/value rows.
  int32_t cp_size_ = 1;
  mutable keel_support::RingAttention ring_;
  TpRegions tp_;
  TpShape share_;
  double matmul_params_ = 0;
  int32_t block_slot_[BLOCK_TENSORS] = {};  // each tensor's index in a decoder layer's specs, -1: none
  BackendBuffer inv_freq_;  // (head_dim/2) fp32: rope's inverse frequencies
  keel_support::LayerSpecs specs_;
  keel_support::ActivationCache<Activations> activations_;
  Scratch scratch_;
  StackedLinear qkv_;      // q|k|v of one block use: (qkv_width, C), attention_bias
  StackedLinear gate_up_;  // gate|up of one block use: (2·hidden, C), mlp_bias
  int64_t recompute_rows_ = 0, recompute_att_bytes_ = 0;
  BackendBuffer recompute_memory_;
  BlockActivations recompute_block_{};  // FULL: every view; SELECTIVE: att_saved and atty
  keel_support::InferenceLogits inference_logits_;
  std::unique_ptr<const keel_support::ExternalNames> external_;
  std::unique_ptr<SparseMlp> sparse_;  // nullptr: every MLP dense
  // LoRA: a dense block's adapters [0] and a sparse block's [1] (targets in their specs; none
  // without lora), each one block use's merged weights and their gradients; lora_ the block in use's.
  std::vector<keel_support::LoraTarget> lora_targets_[2];
  keel_support::LoraLayer lora_layers_[2];
  keel_support::LoraLayer* lora_ = &lora_layers_[0];
  // QAT: a dense block's [0] and a sparse block's [1] fake-quantized weights (model.qat); qat_ the
  // block in use's.
  keel_support::QatLayer qat_layers_[2];
  keel_support::QatLayer* qat_ = &qat_layers_[0];
};

}  // namespace keel_llama
