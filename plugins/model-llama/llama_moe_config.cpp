// The sparse-MLP keys, each bounded, and the relations between them refused with the numbers:
// top-k above the experts, a layer index outside the model, and what the exported layout cannot
// hold (Mixtral: no shared expert, weights always renormalised, every layer sparse, experts as
// wide as ffn_hidden; Qwen2-MoE: a shared expert).
#include "llama_moe_config.hpp"

#include <algorithm>
#include <string>

namespace keel_llama {

using keel_support::ConfigError;
using keel_support::JsonSection;

bool MoeConfig::sparse(int64_t layer) const {
  if (!enabled()) return false;
  if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end()) return false;
  return (layer + 1) % decoder_sparse_step == 0;
}

namespace {

std::vector<int32_t> parse_layer_list(JsonSection& model, const char* key, int32_t n_layer) {
  std::vector<int32_t> layers;
  if (!model.has(key)) return layers;
  const nlohmann::json& list = model.raw(key);
  if (!list.is_array())
    throw ConfigError(model.path_of(key) + ": expected a list of layer indices, found " + list.dump());
  for (size_t i = 0; i < list.size(); ++i) {
    const nlohmann::json& v = list[i];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= n_layer)
      throw ConfigError(model.path_of(key) + "[" + std::to_string(i) + "]: expected a layer index in [0, " +
                        std::to_string(n_layer - 1) + "] (model.n_layer is " + std::to_string(n_layer) +
                        "), found " + v.dump());
    layers.push_back(v.get<int32_t>());
  }
  return layers;
}

void check_mixtral_layout(JsonSection& model, const MoeConfig& m, int32_t ffn_hidden) {
  const std::string why = " (without attention_bias the model is exported as transformers' MixtralForCausalLM";
  if (m.shared_expert_ffn_hidden > 0)
    throw ConfigError(model.path_of("shared_expert_ffn_hidden") + " is " + std::to_string(m.shared_expert_ffn_hidden) +
                      ", but Mixtral has no shared expert" + why + "; a shared expert is Qwen2-MoE's, with "
                      "attention_bias true)");
  if (!m.norm_topk_prob)
    throw ConfigError(model.path_of("norm_topk_prob") + " is false, but Mixtral always renormalises the chosen "
                      "experts' weights" + why + "; Qwen2-MoE's layout, with attention_bias true, does not)");
  if (m.decoder_sparse_step != 1 || !m.mlp_only_layers.empty())
    throw ConfigError(model.path_of("decoder_sparse_step") + " / " + model.path_of("mlp_only_layers") +
                      ": every Mixtral layer is sparse" + why + "; dense layers are Qwen2-MoE's, with "
                      "attention_bias true)");
  if (m.expert_ffn_hidden != ffn_hidden)
    throw ConfigError(model.path_of("expert_ffn_hidden") + " is " + std::to_string(m.expert_ffn_hidden) + ", but " +
                      model.path_of("ffn_hidden") + " is " + std::to_string(ffn_hidden) + ": Mixtral's experts are "
                      "intermediate_size wide" + why + ")");
}

}  // namespace

MoeConfig parse_moe_config(JsonSection& model, int32_t n_layer, int32_t ffn_hidden, bool attention_bias,
                           bool mlp_bias) {
  MoeConfig m;
  m.n_experts = model.get_in_range<int32_t>("n_experts", m.n_experts, 0, 1 << 16);
  m.n_experts_per_token = model.get_in_range<int32_t>("n_experts_per_token", m.n_experts_per_token, 1, 1 << 16);
  m.expert_ffn_hidden = model.get_in_range<int32_t>("expert_ffn_hidden", ffn_hidden, 1, 1 << 22);
  m.shared_expert_ffn_hidden = model.get_in_range<int32_t>("shared_expert_ffn_hidden", 0, 0, 1 << 22);
  m.norm_topk_prob = model.get<bool>("norm_topk_prob", m.norm_topk_prob);
  m.router_aux_loss_coef = model.get_in_range<double>("router_aux_loss_coef", 0.0, 0.0, 1e6);
  m.router_z_loss_coef = model.get_in_range<double>("router_z_loss_coef", 0.0, 0.0, 1e6);
  m.router_bias_update_speed = model.get_in_range<double>("router_bias_update_speed", 0.0, 0.0, 1.0);
  m.capacity_factor = model.get_in_range<double>("capacity_factor", 0.0, 0.0, 1e3);
  m.router_scores =
      model.get_choice("router_scores", "softmax", {"softmax", "sigmoid"}) == "sigmoid" ? RouterScores::SIGMOID
                                                                                      : RouterScores::SOFTMAX;
  m.decoder_sparse_step = model.get_in_range<int32_t>("decoder_sparse_step", 1, 1, n_layer);
  m.mlp_only_layers = parse_layer_list(model, "mlp_only_layers", n_layer);
  if (!m.enabled()) {
    for (const char* key : {"n_experts_per_token", "expert_ffn_hidden", "shared_expert_ffn_hidden", "norm_topk_prob",
                            "router_aux_loss_coef", "router_z_loss_coef", "router_bias_update_speed", "capacity_factor",
                            "router_scores", "decoder_sparse_step",
                            "mlp_only_layers"})
      if (model.has(key))
        throw ConfigError(model.path_of(key) + " is given, but " + model.path_of("n_experts") +
                          " is 0 (a dense model): set n_experts to use it, or leave it out");
    return m;
  }
  if (m.n_experts_per_token > m.n_experts)
    throw ConfigError(model.path_of("n_experts_per_token") + " (" + std::to_string(m.n_experts_per_token) +
                      ") must be at most " + model.path_of("n_experts") + " (" + std::to_string(m.n_experts) +
                      "): each token reaches that many different experts");
  if (mlp_bias)
    throw ConfigError(model.path_of("mlp_bias") + " with " + model.path_of("n_experts") + " (" +
                      std::to_string(m.n_experts) + ") is refused: neither Mixtral's nor Qwen2-MoE's experts have "
                      "biases");
  if (attention_bias && m.shared_expert_ffn_hidden == 0)
    throw ConfigError(model.path_of("shared_expert_ffn_hidden") + " is 0, but with attention_bias the model is "
                      "exported as transformers' Qwen2MoeForCausalLM, which always has a shared expert: give its "
                      "width (shared_expert_intermediate_size)");
  if (!attention_bias) check_mixtral_layout(model, m, ffn_hidden);
  bool any_sparse = false;
  for (int32_t i = 0; i < n_layer; ++i) any_sparse = any_sparse || m.sparse(i);
  if (!any_sparse)
    throw ConfigError(model.path_of("n_experts") + " is " + std::to_string(m.n_experts) + ", but " +
                      model.path_of("decoder_sparse_step") + " (" + std::to_string(m.decoder_sparse_step) + ") and " +
                      model.path_of("mlp_only_layers") + " leave no layer sparse");
  return m;
}

void add_moe_huggingface_keys(nlohmann::json& hf, const MoeConfig& moe, bool qwen2) {
  hf["num_experts_per_tok"] = moe.n_experts_per_token;
  hf["output_router_logits"] = moe.router_aux_loss_coef > 0;
  hf["router_aux_loss_coef"] = moe.router_aux_loss_coef;
  // transformers' Mixtral and Qwen2-MoE score by softmax only: a sigmoid router is named (DeepSeek's
  // key) so a reader can tell, and Keel's own import refuses it.
  if (moe.router_scores == RouterScores::SIGMOID) hf["scoring_func"] = "sigmoid";
  if (!qwen2) {
    hf["model_type"] = "mixtral";
    hf["architectures"] = {"MixtralForCausalLM"};
    hf["num_local_experts"] = moe.n_experts;
    hf["sliding_window"] = nullptr;
    hf["router_jitter_noise"] = 0.0;
    hf.erase("attention_bias");
    hf.erase("mlp_bias");
    return;
  }
  hf["model_type"] = "qwen2_moe";
  hf["architectures"] = {"Qwen2MoeForCausalLM"};
  hf["num_experts"] = moe.n_experts;
  hf["moe_intermediate_size"] = moe.expert_ffn_hidden;
  hf["shared_expert_intermediate_size"] = moe.shared_expert_ffn_hidden;
  hf["norm_topk_prob"] = moe.norm_topk_prob;
  hf["decoder_sparse_step"] = moe.decoder_sparse_step;
  hf["mlp_only_layers"] = moe.mlp_only_layers;
}

void complete_moe_config(keel_support::ExternalConfigMerge& merge) {
  const nlohmann::json& hf = merge.external();
  const std::string type = hf.at("model_type").get<std::string>();
  if (type != "mixtral" && type != "qwen2_moe") {
    merge.take_value("n_experts", 0, "model_type \"" + type + "\" (a dense model)");
    return;
  }
  merge.require_value("router_jitter_noise", 0.0, "Keel's router adds no noise");
  merge.require_one_of("scoring_func", {"softmax"}, /*absent_ok=*/true);
  merge.take("n_experts_per_token", "num_experts_per_tok", 2);
  const bool balancing = merge.has_external("output_router_logits") && hf.at("output_router_logits") == true;
  // transformers adds router_aux_loss_coef × the balancing loss only with output_router_logits.
  if (balancing) merge.take("router_aux_loss_coef", "router_aux_loss_coef", 0.001);
  else merge.take_value("router_aux_loss_coef", 0.0, "\"output_router_logits\" (false: no balancing loss)");
  if (type == "mixtral") {
    // Mixtral's attention masks beyond a sliding window; one at least as long as the training
    // context masks nothing.
    const nlohmann::json section = nlohmann::json::parse(merge.result());
    if (merge.has_external("sliding_window") && hf.at("sliding_window").is_number() && section.contains("seq_len") &&
        hf.at("sliding_window").get<double>() < section.at("seq_len").get<double>())
      throw ConfigError("config.json's \"sliding_window\" is " + hf.at("sliding_window").dump() +
                        ", shorter than model.seq_len (" + section.at("seq_len").dump() + "): Keel's llama attends "
                        "to the whole causal context; set seq_len at most the window");
    merge.take("n_experts", "num_local_experts", 8);
    merge.take("expert_ffn_hidden", "intermediate_size");
    return;
  }
  merge.take("n_experts", "num_experts", 60);
  merge.take("expert_ffn_hidden", "moe_intermediate_size", 1408);
  merge.take("shared_expert_ffn_hidden", "shared_expert_intermediate_size", 5632);
  merge.take("norm_topk_prob", "norm_topk_prob", false);
  merge.take("decoder_sparse_step", "decoder_sparse_step", 1);
  if (merge.has_external("mlp_only_layers") && !hf.at("mlp_only_layers").empty())
    merge.take("mlp_only_layers", "mlp_only_layers");
}

}  // namespace keel_llama
