// The "huggingface" format of the llama model: the names as they are, the vocabulary cut back to
// vocab_size rows, and the config.json of the transformers class that computes the same model:
// Qwen2Config (model_type "qwen2", Qwen2ForCausalLM) when q, k and v have biases, else
// LlamaConfig with mlp_bias as configured (the config refuses both together). Keel trains
// without dropout, so the exported config has none either. LoRA's adapters are not in it.
#include "llama_external.hpp"

#include <nlohmann/json.hpp>

#include "llama_config.hpp"

namespace keel_llama {

namespace {

std::string huggingface_config(const LlamaConfig& c) {
  const bool qwen2 = c.attention_bias;
  nlohmann::json j = {
      {"model_type", qwen2 ? "qwen2" : "llama"},
      {"architectures", {qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM"}},
      {"vocab_size", c.vocab_size},
      {"hidden_size", c.d_model},
      {"intermediate_size", c.ffn_hidden},
      {"num_hidden_layers", c.n_layer},
      {"num_attention_heads", c.n_head},
      {"num_key_value_heads", c.n_kv_head},
      {"head_dim", c.head_dim()},
      {"max_position_embeddings", c.max_seq_len},
      {"rms_norm_eps", c.rms_eps},
      {"rope_theta", c.rope_theta},
      {"hidden_act", "silu"},
      {"attention_bias", false},
      {"mlp_bias", c.mlp_bias},
      {"attention_dropout", 0.0},
      {"tie_word_embeddings", c.tie_embeddings},
      {"initializer_range", 0.02},
      {"use_cache", true},
      {"torch_dtype", "float32"},
  };
  if (qwen2) {  // Qwen2Config's keys: its biases are implied; no sliding window
    j.erase("attention_bias");
    j.erase("mlp_bias");
    j.erase("head_dim");
    j["use_sliding_window"] = false;
    j["sliding_window"] = c.max_seq_len;
    j["max_window_layers"] = c.n_layer;
  }
  if (c.moe.enabled()) add_moe_huggingface_keys(j, c.moe, qwen2);
  if (c.rope_scaling.factor > 0)
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", c.rope_scaling.factor},
                         {"low_freq_factor", c.rope_scaling.low_freq_factor},
                         {"high_freq_factor", c.rope_scaling.high_freq_factor},
                         {"original_max_position_embeddings", c.rope_scaling.original_max_position}};
  else
    j["rope_scaling"] = nullptr;
  // A QAT run's scheme, for `keel export --quantize` (which turns it into quantization_config;
  // a plain export leaves it out).
  if (c.qat.enabled())
    j["keel_qat"] = {{"bits", c.qat.bits},
                     {"group_size", c.qat.group_size},
                     {"activation_bits", c.qat.activation_bits},
                     {"modules", c.qat.target_modules}};
  return j.dump(2) + "\n";
}


}  // namespace

std::unique_ptr<keel_support::ExternalNames> llama_external_names(const LlamaConfig& config,
                                                                  const std::vector<std::string>& keel_names) {
  auto names = std::make_unique<keel_support::ExternalNames>("the llama model", huggingface_config(config));
  if (config.moe.router_bias_update_speed > 0)
    names->refuse_export("model.router_bias_update_speed is " + std::to_string(config.moe.router_bias_update_speed) +
                         ": the model routes with loss-free balancing's per-expert biases, for which transformers' " +
                         (config.attention_bias ? "Qwen2-MoE" : "Mixtral") + " has no place, so the export would choose "
                         "other experts than the trained model does");
  // LoRA's adapters are no tensor of the transformers model: left out of its files, neither
  // exported nor read by model.init_from (a base model's folder initialises the rest). They are
  // PEFT's adapter folder, under PEFT's keys, where nothing else is.
  const char* peft = keel_support::ExternalNames::kAdapterFormat;
  if (config.lora.enabled()) names->add_format(peft, keel_support::peft_adapter_config(config.lora, /*fan_in_fan_out=*/false));
  for (const auto& name : keel_names) {
    const bool adapter = name.find(".lora_") != std::string::npos;
    if (config.lora.enabled()) names->add_to(peft, adapter ? "base_model.model." + name : "");
    if (adapter) {
      names->add("");
      continue;
    }
    const bool vocabulary = name == "model.embed_tokens.weight" || name == "lm_head.weight";
    names->add(name, false, vocabulary ? config.vocab_size : -1);
  }
  return names;
}

}  // namespace keel_llama
