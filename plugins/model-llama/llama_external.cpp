// The "huggingface" format of the llama model: the names as they are, the vocabulary cut back to
// vocab_size rows, and LlamaConfig's config.json. Keel trains without dropout or biases, so the
// exported config has none either.
#include "llama_external.hpp"

#include <keel_support/abi_guard.hpp>
#include <nlohmann/json.hpp>

#include "llama_config.hpp"

namespace keel_llama {

using keel_support::StatusError;

namespace {

constexpr const char* kHuggingFace = "huggingface";

std::string huggingface_config(const LlamaConfig& c) {
  nlohmann::json j = {
      {"model_type", "llama"},
      {"architectures", {"LlamaForCausalLM"}},
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
      {"mlp_bias", false},
      {"attention_dropout", 0.0},
      {"tie_word_embeddings", c.tie_embeddings},
      {"initializer_range", 0.02},
      {"use_cache", true},
      {"torch_dtype", "float32"},
  };
  if (c.rope_scaling.factor > 0)
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", c.rope_scaling.factor},
                         {"low_freq_factor", c.rope_scaling.low_freq_factor},
                         {"high_freq_factor", c.rope_scaling.high_freq_factor},
                         {"original_max_position_embeddings", c.rope_scaling.original_max_position}};
  else
    j["rope_scaling"] = nullptr;
  return j.dump(2) + "\n";
}

}  // namespace

LlamaExternalNames::LlamaExternalNames(const LlamaConfig& config, const std::vector<std::string>& keel_names)
    : names_(keel_names), hf_config_json_(huggingface_config(config)) {
  for (const auto& name : names_) {
    keel_external_tensor t{};
    t.struct_size = sizeof t;
    t.name = name.c_str();  // names_ no longer grows, so the pointers stay valid
    const bool vocabulary = name == "model.embed_tokens.weight" || name == "lm_head.weight";
    t.rows = vocabulary ? config.vocab_size : -1;
    huggingface_.push_back(t);
  }
}

void LlamaExternalNames::require_known(const std::string& format) const {
  if (format != kHuggingFace)
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, "no external format named '" + format +
                                                  "'; the llama model knows: " + kHuggingFace);
}

keel_external_tensor LlamaExternalNames::tensor(const std::string& format, size_t index) const {
  require_known(format);
  if (index >= huggingface_.size())
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "external_name: parameter index " + std::to_string(index) +
                                                     " is past the last parameter (" +
                                                     std::to_string(huggingface_.size()) + " parameters)");
  return huggingface_[index];
}

const char* LlamaExternalNames::config_json(const std::string& format) const {
  require_known(format);
  return hf_config_json_.c_str();
}

}  // namespace keel_llama
