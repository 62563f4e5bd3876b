// The "huggingface" format of the llama model: the names as they are, the vocabulary cut back to
// vocab_size rows, and LlamaConfig's config.json. Keel trains without dropout or biases, so the
// exported config has none either.
#include "llama_external.hpp"

#include <nlohmann/json.hpp>

#include "llama_config.hpp"

namespace keel_llama {

namespace {

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

std::unique_ptr<keel_support::ExternalNames> llama_external_names(const LlamaConfig& config,
                                                                  const std::vector<std::string>& keel_names) {
  auto names = std::make_unique<keel_support::ExternalNames>("the llama model", huggingface_config(config));
  for (const auto& name : keel_names) {
    const bool vocabulary = name == "model.embed_tokens.weight" || name == "lm_head.weight";
    names->add(name, false, vocabulary ? config.vocab_size : -1);
  }
  return names;
}

}  // namespace keel_llama
