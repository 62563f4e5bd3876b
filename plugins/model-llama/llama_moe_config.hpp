// The llama model's sparse-MLP keys (mixture of experts, issue 42): how many experts each sparse
// layer has, how many a token reaches, how their weights are scored and balanced, and which layers
// are sparse, under the names transformers' MixtralConfig and Qwen2MoeConfig give them where Keel
// has no name of its own. Part of LlamaConfig; n_experts 0 (the default) is the dense model.
#pragma once

#include <cstdint>
#include <vector>

#include <keel_support/common/json_section.hpp>     // defines: JsonSection
#include <keel_support/model/external_config.hpp>  // defines: ExternalConfigMerge

namespace keel_llama {

enum class RouterScores { SOFTMAX, SIGMOID };

struct MoeConfig {
  int32_t n_experts = 0;                 // experts of each sparse layer; 0: every MLP dense
  int32_t n_experts_per_token = 2;       // top-k: experts each token reaches
  int32_t expert_ffn_hidden = 0;         // each expert's hidden width (Qwen2-MoE's moe_intermediate_size)
  int32_t shared_expert_ffn_hidden = 0;  // the shared expert's hidden width (Qwen2-MoE); 0: none
  bool norm_topk_prob = true;            // the chosen experts' weights divided by their sum (Mixtral: always)
  double router_aux_loss_coef = 0.0;     // the load-balancing loss's weight (transformers' formula); 0: off
  double router_z_loss_coef = 0.0;       // the router z-loss's weight (ST-MoE: mean of logsumexp²); 0: off
  double router_bias_update_speed = 0.0; // loss-free balancing's γ (llama_moe_balance.hpp); 0: off
  double capacity_factor = 0.0;          // > 0: an expert takes at most ceil(f·N·K/E) of a micro-batch's
                                         // pairs, the rest dropped (GShard); 0: dropless
  RouterScores router_scores = RouterScores::SOFTMAX;
  int32_t decoder_sparse_step = 1;       // every step-th layer is sparse (Qwen2-MoE)
  std::vector<int32_t> mlp_only_layers;  // layers kept dense (Qwen2-MoE)

  bool enabled() const { return n_experts > 0; }
  // transformers' rule (Qwen2MoeDecoderLayer): layer i is sparse when it is not in mlp_only_layers,
  // there are experts, and (i + 1) is a multiple of decoder_sparse_step.
  bool sparse(int64_t layer) const;
};

// Reads the keys from the model section (before its finish()); `n_layer`, `ffn_hidden` and
// `attention_bias` are the section's, already read: attention_bias picks the layout the model
// exports (Qwen2-MoE's with q/k/v biases, else Mixtral's), and the keys are checked against it.
MoeConfig parse_moe_config(keel_support::JsonSection& model, int32_t n_layer, int32_t ffn_hidden, bool attention_bias,
                           bool mlp_bias);

// The sparse-MLP keys from a config.json: MixtralConfig's (model_type "mixtral") and
// Qwen2MoeConfig's ("qwen2_moe"); a dense model_type sets n_experts 0. The balancing loss's weight
// is taken only where output_router_logits says transformers trains with it.
void complete_moe_config(keel_support::ExternalConfigMerge& merge);

// The other way, for `keel export`: `hf` (a LlamaConfig's or Qwen2Config's keys) becomes a
// MixtralConfig (`qwen2` false) or a Qwen2MoeConfig with the experts' keys.
void add_moe_huggingface_keys(nlohmann::json& hf, const MoeConfig& moe, bool qwen2);

}  // namespace keel_llama
