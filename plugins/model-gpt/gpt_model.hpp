// GPT-2 (as in llm.c's train_gpt2.c) written against the backend op set: its config, its
// parameter specs, and the forward/backward pair. The model owns activations only; parameters
// and their gradients come one layer at a time from the strategy's keel_param_access.
// Layers (units of acquire/release): 0 = wte + wpe (wte is also the tied lm_head),
// 1..n_layer = transformer blocks, n_layer+1 = ln_f.
// Tensor parallelism (tp > 1, Megatron-LM): heads and the MLP's hidden units are split over the
// tp group (column-parallel qkv and mlp.fc, row-parallel attn.proj and mlp.proj), the vocabulary
// too (wte and the tied lm_head, with a vocabulary-parallel cross-entropy); with sequence
// parallelism the norm and residual regions hold 1/tp of the token rows. keel_support/model/tp_regions.hpp
// is all the communication.
// Pipeline parallelism (pp > 1): this rank holds only its chunks' blocks (keel_support/model/chunk_plan.hpp), under
// the whole model's layer ids; a chunk's forward starts from the previous chunk's residual stream
// and hands its own on, and the last chunk's rank keeps a copy of wte for the lm_head.
#pragma once

#include <keel/model.h>
#include <keel/plugin.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gpt_external_names.hpp"  // defines: gpt_external_names
#include <keel_support/model/activation_cache.hpp>  // defines: ActivationCache
#include <keel_support/common/backend_ops.hpp>     // defines: BackendOps, KEEL_OP
#include <keel_support/model/chunk_calls.hpp>     // defines: read_forward_call, read_backward_call
#include <keel_support/model/compute_ops.hpp>     // defines: ComputeOps, Elems
#include <keel_support/model/carver.hpp>          // defines: Carver
#include <keel_support/model/chunk_plan.hpp>      // defines: ChunkPlan
#include <keel_support/model/layer_lease.hpp>     // defines: LayerLease
#include <keel_support/model/layer_specs.hpp>     // defines: LayerSpecs, NamedSpec, split_for_tp
#include <keel_support/model/lora.hpp>            // defines: LoraConfig, LoraLayer
#include <keel_support/model/qat.hpp>             // defines: QatConfig, QatLayer
#include <keel_support/model/ring_attention.hpp>  // defines: RingAttention
#include <keel_support/model/model_support.hpp>   // defines: make_spec, check_token_ids, mean_loss
#include <keel_support/model/recompute.hpp>       // defines: Recompute, recompute_name
#include <keel_support/model/tp_regions.hpp>      // defines: TpRegions, VocabShard, InferenceLogits

namespace keel_gpt {

using keel_support::BackendOps;
using keel_support::ChunkPlan;
using keel_support::Recompute;
using keel_support::TpRegions;
using keel_support::BackendBuffer;
using keel_support::ComputeOps;
using keel_support::Elems;
using keel_support::LayerLease;

struct GptConfig {
  int32_t n_layer = 12;
  int32_t n_head = 12;
  int32_t d_model = 768;
  int32_t vocab_size = 50257;
  int32_t padded_vocab_size = 50304;  // vocab_size rounded up to a multiple of 128
  int32_t max_seq_len = 1024;
  Recompute recompute = Recompute::NONE;
  keel_support::LoraConfig lora;  // r 0: no adapters, every tensor trains
  keel_support::QatConfig qat;    // bits 0: no fake quantization
};

// The block linears by their Hugging Face (Conv1D) module names, as PEFT's target_modules and
// model.qat name them: "c_proj" is both attn.c_proj and mlp.c_proj, as PEFT matches it.
extern const std::vector<std::string> kGptLinearModules;

// Reads and checks the "model" section; throws keel_support::ConfigError naming the JSON path.
GptConfig parse_gpt_config(const char* config_json, const char* json_path);

// The section completed from transformers' GPT2Config (a config.json of model_type "gpt2"):
// n_layer, n_head, n_embd, vocab_size and n_positions, taken or compared.
std::string complete_gpt_config(const std::string& format, const char* external_json, const char* config_json,
                                const char* json_path);

// Index of each tensor inside a block's layer, in spec order.
enum BlockTensor {
  LN1_W, LN1_B, QKV_W, QKV_B, ATTPROJ_W, ATTPROJ_B, LN2_W, LN2_B, FC_W, FC_B, FCPROJ_W, FCPROJ_B,
  BLOCK_TENSORS
};
enum EmbeddingTensor { WTE, WPE };
enum FinalNormTensor { LNF_W, LNF_B };

// This rank's share of the model under tensor parallelism (everything whole at tp 1).
struct TpShape {
  int64_t heads = 0;        // NH/tp attention heads
  int64_t channels = 0;     // C/tp: the heads' channels, attn.proj's input columns
  int64_t hidden = 0;       // 4C/tp: the MLP's hidden units
  keel_support::VocabShard vocab;  // Vp/tp rows of wte, columns of the logits
};

// What the WEIGHT part of a split backward (zero-bubble schedules) reads: the gradient of the
// output of every layer with weights, saved by the INPUT part, which computed them on its way to
// the chunk's input gradient. Shapes as in Activations; allocated at a chunk's first split.
struct SavedOutputGrads {
  BackendBuffer memory;
  Elems fcproj;   // (L,B,T,C) of mlp.proj's output
  Elems fch;      // (L,B,T,4C) of mlp.fc's output
  Elems ln2;      // (L,Nr,C) of ln_2's output, this rank's rows
  Elems attproj;  // (L,B,T,C) of attn.proj's output
  Elems qkv;      // (L,B,T,3C) of attn.qkv's output
  Elems ln1;      // (L,Nr,C) of ln_1's output
  Elems logits;   // (B,T,Vp) of the lm_head's output (last chunk)
  Elems lnf;      // (Nr,C) of ln_f's output (last chunk)
  Elems encoded;  // (Nr,C) of the embedding's output (chunk 0)
};

// One block's forward tensors that its backward reads (shapes as in Activations, one layer): views
// into a micro-batch's Activations, or, for what recomputation drops, into RecomputeScratch.
struct BlockActivations {
  Elems ln1;         // (B,T,C)
  float* ln1_mean;   // (Nr)
  float* ln1_rstd;   // (Nr)
  Elems qkv;         // (B,T,3C)
  Elems atty;        // (B,T,C)
  char* att_saved;   // attention_saved_bytes
  Elems residual2;   // (Nr,C)
  Elems ln2;         // (B,T,C)
  float* ln2_mean;   // (Nr)
  float* ln2_rstd;   // (Nr)
  Elems fch;         // (B,T,4C)
  Elems fch_gelu;    // (B,T,4C)
  const int32_t* positions = nullptr;  // (B,T) a packed batch's positions; nullptr: one sequence per row
  int64_t block = 0;                   // the model's block index (its dropout masks' key)
  uint64_t dropout_seed = 0;           // the micro-batch's (model.h); 0: no dropout
};

// What recomputation writes, one block's worth shared by every micro-batch and layer (one forward
// or backward runs at a time), sized for the largest B*T seen: the forward writes a dropped tensor
// here and the next layer overwrites it; the backward recomputes it here just before reading it.
struct RecomputeScratch {
  int64_t rows = 0;             // B*T it was sized for
  int64_t att_saved_bytes = 0;  // attention_saved_bytes at that shape
  BackendBuffer memory;
  BlockActivations block;       // FULL: every view; SELECTIVE: att_saved only
  Elems atty;                   // (B,T,C) SELECTIVE: attention's output again (equal to the kept one)
};

// One micro-batch's saved forward state of one chunk in one backend allocation (llm.c's
// ActivationTensors); Elems are at the compute type (fp32 or bf16), float* fp32 always. L below
// is the chunk's block count; lnf, logits and the loss buffers exist on
// the last chunk only, and `encoded` is the chunk's residual-stream start (the embedding on chunk 0,
// the previous chunk's output on later ones).
// Recomputation (GptConfig::recompute) leaves out what it drops: att_saved under SELECTIVE, and
// under FULL every per-layer tensor but residual3 (each block's output, the next one's input).
// Shapes below are at tp 1; at tp > 1 the head, hidden and vocabulary dimensions are this rank's
// share (TpShape) and, with sequence parallelism, the norm and residual regions (encoded,
// residual*, the norms' mean/rstd) hold this rank's N/tp rows, while ln1, ln2 and lnf hold the
// gathered full rows the column-parallel matmuls read.
// The attention output projection and the MLP output projection are written straight into
// the residual buffers (then the residual is added in place), so they need no buffers of
// their own: their backward only needs the gradient of the residual.
struct Activations {
  int32_t B = 0, T = 0;
  int32_t chunk = 0;    // the pipeline chunk whose forward this holds
  int32_t blocks = 0;   // its transformer blocks (L)
  bool head = false;    // it is the last chunk: ln_f, logits and loss
  BackendBuffer memory;
  Elems encoded;     // (B,T,C) token + position embedding
  Elems ln1;         // (L,B,T,C)
  float* ln1_mean;   // (L,B,T)
  float* ln1_rstd;   // (L,B,T)
  Elems qkv;         // (L,B,T,3C)
  Elems atty;        // (L,B,T,C) attention output before its projection
  char* att_saved;  // (L, attention_saved_bytes) what attention_backward needs
  Elems residual2;   // (L,B,T,C) residual after the attention branch
  Elems ln2;         // (L,B,T,C)
  float* ln2_mean;   // (L,B,T)
  float* ln2_rstd;   // (L,B,T)
  Elems fch;         // (L,B,T,4C)
  Elems fch_gelu;    // (L,B,T,4C)
  Elems residual3;   // (L,B,T,C) residual after the MLP branch: the block's output
  Elems lnf;         // (B,T,C)
  float* lnf_mean;   // (B,T)
  float* lnf_rstd;   // (B,T)
  Elems logits;      // (B,T,Vp) logits (this rank's vocabulary shard)
  float* lse;        // (B,T) log Σ exp of each row's logits over the whole vocabulary
  float* ce_stats;   // (B,T,3) this rank's cross-entropy statistics of its vocabulary shard, then
                     // (tp,B,T,3) every rank's, gathered (tp > 1)
  float* loss_sum;   // 1: the mean loss, when the caller keeps none in backend memory
  int32_t* tokens;   // (B,T) copied at forward for the embedding backward
  int32_t* targets;  // (B,T) copied at forward for the cross-entropy backward
  int32_t* positions;  // (B,T) a packed batch's positions, restarting per document
  bool packed = false;  // this micro-batch's forward had positions
  uint64_t dropout_seed = 0;  // its forward's (model.h 0.19); the backward and recomputation draw the same masks
  int64_t att_saved_per_layer = 0;  // bytes
  int64_t valid_targets = 0;      // targets >= 0: the mean's denominator
  bool backward_pending = false;  // forward had targets and no backward has consumed it yet
  bool weight_pending = false;    // a split backward's INPUT part ran, its WEIGHT part not yet
  SavedOutputGrads saved;         // for the WEIGHT part; empty until a split backward
};

// Activation gradients, shared by all micro-batches (only one backward runs at a time), sized
// for the largest B*T seen. Every op accumulates into them, so each is zeroed before use.
struct GradScratch {
  int64_t rows = 0;  // B*T it was sized for
  BackendBuffer memory;
  Elems dresidual;   // (B,T,C) gradient of the residual stream, carried down the blocks
  Elems dln;         // (B,T,C) gradient of a layernorm's output (ln_f, ln_2, ln_1 in turn)
  Elems datty;       // (B,T,C)
  Elems dqkv;        // (B,T,3C)
  Elems dfch_gelu;   // (B,T,4C)
  Elems dfch;        // (B,T,4C)
  // tensor and sequence parallelism only
  Elems ln_rows;     // (N/tp,C) a layernorm's output on this rank's rows, before the all-gather
  Elems partial;     // (B,T,C) a row-parallel matmul's partial sums, before the reduce-scatter
  Elems dln_rows;    // (N/tp,C) dln reduce-scattered to this rank's rows
  Elems dgathered;   // (B,T,C) dresidual all-gathered from every rank's rows
  float* dnorm;      // (2C) a layernorm's weight and bias gradient from this rank's rows
};

// Generation with a key/value cache (gpt_decode.cpp): the cache, and one call's activations.
struct DecodeCache {
  BackendBuffer cache;      // (L, 2, B, NH, capacity, hs): each block's keys, then its values
  BackendBuffer last;       // the previous call's activations, whose logits the core still reads
  int64_t per_block = 0;    // elements of one block's keys (or values)
  int32_t batch = 0, capacity = 0, length = 0;  // rows, positions it holds, positions cached
};
struct DecodeBuffers {
  BackendBuffer memory;
  Elems residual, ln, qkv, atty, residual2, fch, fch_gelu, logits;
  float* mean = nullptr;
  float* rstd = nullptr;
  int32_t* tokens = nullptr;
};

class GptModel {
 public:
  static constexpr const char* kSource = "model gpt";
  static void validate_config(const char* config_json, const char* json_path) {
    parse_gpt_config(config_json, json_path);
  }
  static std::string complete_config(const std::string& format, const char* external_json, const char* config_json,
                                     const char* json_path) {
    return complete_gpt_config(format, external_json, config_json, json_path);
  }
  GptModel(const keel_host* host, const keel_model_create_args& args);

  const keel_host* host() const { return host_; }
  void describe(keel_model_info* out) const;
  double flops_per_token(int32_t seq_len) const;
  void forward(keel_forward_args* args);
  void backward(const keel_backward_args& args);
  // Elements a chunk hands the next (at the compute type): its residual stream, this rank's rows
  // under sequence parallelism.
  int64_t stage_io_numel(int32_t B, int32_t T) const {
    return norm_rows(static_cast<int64_t>(B) * T) * config_.d_model;
  }
  // Generation with a key/value cache (model.h 0.18, gpt_decode.cpp).
  void decode_reset(int32_t batch, int32_t capacity);
  const float* decode(const keel_param_access* access, const int32_t* tokens, int32_t batch, int32_t count);
  // backward implements KEEL_BACKWARD_INPUT / _WEIGHT (zero-bubble schedules).
  bool splits_backward() const { return true; }
  // Names and layouts in external formats ("huggingface"), for export and import.
  const keel_support::ExternalNames& external() const { return *external_; }

 private:
  void build_param_specs();
  void add_lora_specs(std::vector<keel_support::NamedSpec>& pending, const std::string& prefix, int32_t layer,
                      bool record_targets);
  void create_qat();
  // The weight a block computes with (a LoRA target's merged one, a QAT target's fake-quantized
  // one) and where its gradient goes (a target's dW scratch; NULL for a frozen tensor, or with
  // `grads` NULL). prepare_weights forms them once per layer use, before any weight is read.
  Elems weight(const LayerLease& lease, BlockTensor t) const {
    return lora_.merges(size_t(t)) ? lora_.weight(lease, size_t(t)) : qat_.weight(size_t(t), lease.param_elems(size_t(t)));
  }
  // `dropout_seed`: the micro-batch's; with LoRA's dropout the targets compute with their base and
  // the blocks add the adapters at each input (lora_.add_dropped).
  void prepare_weights(const LayerLease& lease, uint64_t dropout_seed = 0) {
    if (qat_.active()) qat_.apply([&](size_t index) { return lease.param_elems(index); });
    if (lora_.active())
      lora_.merge(lease, [&](size_t index) { return qat_.weight(index, lease.param_elems(index)); }, dropout_seed);
  }
  // An input's dropout mask seed in block v.block, and where this rank's columns start in a
  // row-parallel input (attention's output, the MLP's hidden activation).
  uint64_t input_seed(const BlockActivations& v, keel_support::LoraInput input) const {
    return keel_support::dropout_site_seed(v.dropout_seed, v.block, input);
  }
  float* weight_grad(const LayerLease* grads, BlockTensor t) const { return lora_.grad(grads, size_t(t)); }
  // attn.c_proj's input, attention's output (N rows): under QAT's activations its fake-quantized
  // copy (forward, and the weight gradient's input in the backward), else itself.
  Elems proj_input(Elems atty, int64_t N) {
    return config_.qat.quantizes_input("c_proj") ? qat_.quantized_input(atty, N, share_.channels) : atty;
  }
  using ActivationKey = keel_support::ActivationCache<Activations>::Key;
  Activations& activations_for(int32_t microbatch, int32_t chunk, int32_t B, int32_t T);
  // The pieces of a chunk's forward and backward, in llm.c's order.
  void embedding_forward(Activations& a, const keel_param_access* access);
  void block_forward(Activations& a, int64_t l, const keel_param_access* access);
  // Block l's tensors that the backward reads, where the recompute mode keeps them.
  BlockActivations block_activations(const Activations& a, int64_t l) const;
  // The block's forward ops from its input into v; with `residual3` empty (a recomputation) it stops
  // after the GELU, the last tensor a backward reads.
  void block_forward_ops(const BlockActivations& v, Elems residual, Elems residual3, const LayerLease& lease,
                         int64_t B, int64_t T);
  // At the start of a block's backward (or WEIGHT part), under the same lease: FULL recomputes the
  // block's forward; SELECTIVE recomputes attention for att_saved (INPUT parts only, `for_input`).
  void recompute_block(const BlockActivations& v, Elems residual, const LayerLease& lease, int64_t B, int64_t T,
                       bool for_input);
  void ensure_recompute_scratch(int64_t B, int64_t T);
  // Attention of one block's qkv into `out`: per document with the 0.19 ops when the batch is
  // packed (v.positions; the saved state is the log-sum-exp), else the 0.1 ops over whole rows.
  int64_t att_saved_bytes(int64_t B, int64_t T) const;
  void attend(const BlockActivations& v, Elems out, int64_t B, int64_t T) const;
  void attend_backward(const BlockActivations& v, Elems dqkv, Elems datty, int64_t B, int64_t T) const;
  // The logits and, when training, the loss: added × loss_weight into loss_sum (backend memory)
  // when it is not NULL, else returned.
  float head_forward(Activations& a, const keel_param_access* access, bool training, int64_t valid_targets,
                     const float** out_logits, float* loss_sum, float loss_weight);
  // The backward pieces compute every gradient or, given `save` (a split backward's INPUT part),
  // only the activation gradients, saving what the WEIGHT part's *_weight_backward read.
  void head_backward(Activations& a, const keel_param_access* access, float loss_scale, SavedOutputGrads* save);
  void block_backward(Activations& a, int64_t l, const keel_param_access* access, SavedOutputGrads* save);
  void embedding_backward(Activations& a, const keel_param_access* access, Elems dencoded_rows);
  void head_weight_backward(Activations& a, const keel_param_access* access);
  void block_weight_backward(Activations& a, int64_t l, const keel_param_access* access);
  SavedOutputGrads& saved_output_grads(Activations& a);
  void weight_backward(const keel_backward_args& args, int32_t chunk);
  void carve_activations(Activations& acts, char* base, size_t* out_bytes) const;
  void ensure_grad_scratch(int64_t rows);
  void check_tensor_parallel(const keel_model_create_args& args);
  // The context-parallel group (model.h 0.19 cp_*), refused where the model cannot use it yet.
  void connect_context_parallel(const keel_model_create_args& args);
  keel_support::RingAttention::Shape ring_shape(int64_t B, int64_t T) const;
  int64_t norm_rows(int64_t rows) const { return tp_.norm_rows(rows); }
  // Rank 0 adds a row-parallel layer's replicated bias into its partial sums, so the reduction
  // adds it exactly once.
  Elems bias_once(Elems bias) const { return tp_.rank() == 0 ? bias : Elems(); }
  // layernorm_backward whose weight and bias gradients reach every tp rank whole: under sequence
  // parallelism each rank's rows give a part, summed over tp before it is accumulated.
  // dweight and dbias NULL: the input gradient only (a split backward's INPUT part).
  void norm_backward(Elems dinp, float* dweight, float* dbias, Elems dout, Elems inp, Elems weight,
                     const float* mean, const float* rstd, int64_t rows);
  // The weight and bias gradients only, from dout (this rank's rows), for the WEIGHT part.
  void norm_weight_backward(float* dweight, float* dbias, Elems dout, Elems inp, Elems weight, const float* mean,
                            const float* rstd, int64_t rows);
  const keel_param_spec* layer_specs(int32_t layer) const { return specs_.layer(layer); }
  size_t layer_size(int32_t layer) const { return specs_.layer_size(layer); }

  const keel_host* host_;
  BackendOps backend_;
  ComputeOps ops_;  // the ops at the backend's compute type
  GptConfig config_;
  ChunkPlan plan_;
  // Context parallelism (model.h cp_size > 1): attention through the ring of key/value chunks.
  int32_t cp_size_ = 1;
  mutable keel_support::RingAttention ring_;
  double matmul_params_ = 0;  // the whole model's, for flops_per_token (every pipeline rank reports it)
  TpRegions tp_;
  TpShape share_;
  keel_support::LayerSpecs specs_;                         // sorted by layer
  keel_support::ActivationCache<Activations> activations_;  // per (micro-batch, chunk) in flight
  GradScratch scratch_;
  RecomputeScratch recompute_;
  keel_support::InferenceLogits inference_logits_;
  DecodeCache decode_;
  std::unique_ptr<const keel_support::ExternalNames> external_;  // built from names_ once the specs exist
  std::vector<keel_support::LoraTarget> lora_targets_;  // each block's, in its specs (none without lora)
  keel_support::LoraLayer lora_;  // one block use's merged weights and their gradients
  keel_support::QatLayer qat_;    // one block use's fake-quantized weights (model.qat)
};

}  // namespace keel_gpt
