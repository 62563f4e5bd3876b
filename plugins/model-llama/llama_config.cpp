// The llama model's config: each key bounded, the relations between them (heads dividing the
// width, key/value heads dividing the heads, an even head dimension for rope) refused with both
// values named, and Llama 3's rope_scaling read as config.json writes it.
#include "llama_config.hpp"

#include <keel_support/model/external_config.hpp>
#include <keel_support/common/json_parse.hpp>
#include <keel_support/common/json_section.hpp>

#include <string>

namespace keel_llama {

using keel_support::ConfigError;
using keel_support::JsonSection;

namespace {

keel_support::RopeScaling parse_rope_scaling(JsonSection& model) {
  keel_support::RopeScaling scaling;
  if (!model.has("rope_scaling") || model.raw("rope_scaling").is_null()) return scaling;
  JsonSection s(model.raw("rope_scaling"), model.path_of("rope_scaling"));
  const std::string type = s.has("rope_type") ? s.get<std::string>("rope_type", "") : s.get<std::string>("type", "");
  if (type != "llama3")
    throw ConfigError(s.path_of("rope_type") + ": only \"llama3\" frequency scaling is supported, found \"" + type +
                      "\"");
  scaling.factor = s.get_in_range<double>("factor", 8.0, 1.0, 1e6);
  scaling.low_freq_factor = s.get_in_range<double>("low_freq_factor", 1.0, 1e-6, 1e6);
  scaling.high_freq_factor = s.get_in_range<double>("high_freq_factor", 4.0, 1e-6, 1e6);
  scaling.original_max_position =
      s.get_in_range<double>("original_max_position_embeddings", 8192.0, 1.0, double(1 << 30));
  s.finish();
  if (!(scaling.high_freq_factor > scaling.low_freq_factor))
    throw ConfigError(s.path_of("high_freq_factor") + " (" + std::to_string(scaling.high_freq_factor) +
                      ") must exceed " + s.path_of("low_freq_factor") + " (" +
                      std::to_string(scaling.low_freq_factor) + ")");
  return scaling;
}

}  // namespace

// The linear modules a model of this config has, by the names PEFT's target_modules match: the
// attention projections; the dense MLP's (gate_proj, up_proj, down_proj), also Qwen2-MoE's experts'
// and shared expert's names; Mixtral's experts' w1, w3, w2; the routers' gate (and Qwen2-MoE's
// shared_expert_gate). "all-linear" takes them all, as PEFT's takes every nn.Linear but the head.
namespace {
std::vector<std::string> linear_modules(const LlamaConfig& c) {
  std::vector<std::string> out = {"q_proj", "k_proj", "v_proj", "o_proj"};
  bool dense = !c.moe.enabled();
  for (int64_t i = 0; i < c.n_layer && !dense; ++i) dense = !c.moe.sparse(i);
  const bool qwen2_experts = c.moe.enabled() && c.attention_bias;
  if (dense || qwen2_experts) out.insert(out.end(), {"gate_proj", "up_proj", "down_proj"});
  if (c.moe.enabled()) {
    if (!qwen2_experts) out.insert(out.end(), {"w1", "w3", "w2"});
    out.push_back("gate");
    if (c.moe.shared_expert_ffn_hidden > 0) out.push_back("shared_expert_gate");
  }
  return out;
}
}  // namespace

LlamaConfig parse_llama_config(const char* config_json, const char* json_path) {
  auto section = JsonSection::parse(config_json, json_path ? json_path : "model");
  section.allow("plugin");
  LlamaConfig c;
  c.n_layer = section.get_in_range<int32_t>("n_layer", c.n_layer, 1, 4096);
  c.d_model = section.get_in_range<int32_t>("d_model", c.d_model, 2, 1 << 20);
  // Without n_kv_head every head has its own keys and values (multi-head attention), as in
  // transformers; the defaults together are SmolLM2's grouped 9/3.
  const bool heads_given = section.has("n_head");
  c.n_head = section.get_in_range<int32_t>("n_head", c.n_head, 1, 4096);
  c.n_kv_head = section.get_in_range<int32_t>("n_kv_head", heads_given ? c.n_head : c.n_kv_head, 1, 4096);
  c.ffn_hidden = section.get_in_range<int32_t>("ffn_hidden", c.ffn_hidden, 1, 1 << 22);
  c.vocab_size = section.get_in_range<int32_t>("vocab_size", c.vocab_size, 1, 1 << 30);
  c.max_seq_len = section.get_in_range<int32_t>("seq_len", c.max_seq_len, 1, 1 << 24);
  c.rope_theta = section.get_in_range<double>("rope_theta", c.rope_theta, 1.0, 1e12);
  c.rms_eps = section.get_in_range<float>("rms_eps", c.rms_eps, 1e-12f, 1.0f);
  c.tie_embeddings = section.get<bool>("tie_embeddings", c.tie_embeddings);
  c.attention_bias = section.get<bool>("attention_bias", c.attention_bias);
  c.mlp_bias = section.get<bool>("mlp_bias", c.mlp_bias);
  c.rope_scaling = parse_rope_scaling(section);
  c.recompute = keel_support::parse_recompute(section);
  c.moe = parse_moe_config(section, c.n_layer, c.ffn_hidden, c.attention_bias, c.mlp_bias);
  // PEFT's default targets for Llama (and Mixtral, Qwen2-MoE) are q_proj and v_proj.
  c.lora = keel_support::parse_lora_config(section, linear_modules(c), {"q_proj", "v_proj"});
  c.qat = keel_support::parse_qat_config(section, linear_modules(c));
  section.finish();
  keel_support::refuse_activations_with_lora(c.qat, c.lora.enabled(), section.path_of("qat"));
  // Stacked projections read one input, quantized once: all of them quantize it, or none.
  for (const std::vector<std::string>& shared : {std::vector<std::string>{"q_proj", "k_proj", "v_proj"},
                                                 std::vector<std::string>{"gate_proj", "up_proj"}}) {
    size_t targeted = 0;
    for (const std::string& m : shared) targeted += c.qat.targets(m) ? 1 : 0;
    if (c.qat.activation_bits && targeted != 0 && targeted != shared.size())
      throw ConfigError(section.path_of("qat") + ".target_modules: with activations quantized, " + shared[0] + ", " +
                        shared[1] + (shared.size() > 2 ? ", " + shared[2] : "") +
                        " read one input, quantized once: target all of them or none");
  }
  if (c.qat.activation_bits && c.moe.enabled())
    throw ConfigError(section.path_of("qat") + ".activations: quantized activations beside experts are not supported "
                                               "yet (quantize the weights only, or leave out " +
                                               section.path_of("n_experts") + ")");
  if (c.d_model % c.n_head != 0)
    throw ConfigError(section.path_of("n_head") + ": must divide " + section.path_of("d_model") + " (" +
                      std::to_string(c.d_model) + "), found " + std::to_string(c.n_head));
  if (c.head_dim() % 2 != 0)
    throw ConfigError("the head dimension " + section.path_of("d_model") + " / " + section.path_of("n_head") + " (" +
                      std::to_string(c.d_model) + " / " + std::to_string(c.n_head) + " = " +
                      std::to_string(c.head_dim()) + ") must be even: rope turns pairs of channels");
  if (c.n_head % c.n_kv_head != 0)
    throw ConfigError(section.path_of("n_kv_head") + ": must divide " + section.path_of("n_head") + " (" +
                      std::to_string(c.n_head) + "), found " + std::to_string(c.n_kv_head));
  // Export names one transformers architecture: q/k/v biases are Qwen2's, MLP biases Llama's,
  // and no architecture has both without o_proj's bias.
  if (c.attention_bias && c.mlp_bias)
    throw ConfigError(section.path_of("attention_bias") + " and " + section.path_of("mlp_bias") +
                      " together are refused: no transformers model biases q, k, v and the MLP but not o_proj, "
                      "so the model could not be exported; choose one");
  c.padded_vocab_size = (c.vocab_size + 127) / 128 * 128;
  return c;
}

std::string complete_llama_config(const std::string& format, const char* external_json, const char* config_json,
                                  const char* json_path) {
  if (format == "peft") {  // a LoRA adapter folder's adapter_config.json: model.lora from it
    const std::string completed = keel_support::complete_lora_from_peft(external_json, config_json, json_path);
    parse_llama_config(completed.c_str(), json_path);
    return completed;
  }
  if (format != "huggingface")
    throw keel_support::StatusError(KEEL_ERR_UNIMPLEMENTED, "no external format named '" + format +
                                                                "'; the llama model knows: huggingface, peft");
  keel_support::ExternalConfigMerge merge(config_json, json_path, external_json, "config.json");
  merge.require_one_of("model_type", {"llama", "qwen2", "mixtral", "qwen2_moe"});
  merge.require_one_of("hidden_act", {"silu"}, /*absent_ok=*/true);
  const auto& hf = merge.external();
  if (hf.at("model_type") == "qwen2" || hf.at("model_type") == "qwen2_moe") {
    // Qwen2: Llama with q, k, v biases; max_window_layers only matters with the window on.
    merge.require_value("use_sliding_window", false, "Keel's llama attends to the whole causal context");
    merge.take_value("attention_bias", true, "model_type \"qwen2\" (q, k and v biases)");
    merge.take_value("mlp_bias", false, "model_type \"qwen2\" (no MLP biases)");
  } else {
    merge.require_value("attention_bias", false,
                        "Llama's attention_bias biases o_proj too; Keel's llama biases q, k and v only, as Qwen2");
    merge.take("attention_bias", "attention_bias", false);
    merge.take("mlp_bias", "mlp_bias", false);
  }
  auto integer = [&](const char* key) { return merge.has_external(key) && hf.at(key).is_number_integer(); };
  if (integer("head_dim") && integer("hidden_size") && integer("num_attention_heads") &&
      hf.at("num_attention_heads").get<int64_t>() > 0 &&
      hf.at("head_dim").get<int64_t>() != hf.at("hidden_size").get<int64_t>() / hf.at("num_attention_heads").get<int64_t>())
    throw ConfigError("config.json: \"head_dim\" " + hf.at("head_dim").dump() + " is not hidden_size / "
                      "num_attention_heads; Keel's llama derives the head dimension from them");
  merge.take("n_layer", "num_hidden_layers");
  merge.take("d_model", "hidden_size");
  merge.take("n_head", "num_attention_heads");
  // transformers: num_key_value_heads defaults to num_attention_heads (multi-head attention).
  merge.take("n_kv_head", merge.has_external("num_key_value_heads") ? "num_key_value_heads" : "num_attention_heads");
  merge.take("ffn_hidden", "intermediate_size");
  merge.take("vocab_size", "vocab_size");
  merge.take_at_most("seq_len", "max_position_embeddings");
  merge.take("rope_theta", "rope_theta", 10000.0);
  merge.take("rms_eps", "rms_norm_eps", 1e-6);
  merge.take("tie_embeddings", "tie_word_embeddings", false);
  if (merge.has_external("rope_scaling")) merge.take("rope_scaling", "rope_scaling");
  complete_moe_config(merge);
  const std::string completed = merge.result();
  parse_llama_config(completed.c_str(), json_path);  // the completed section is a valid one
  return completed;
}

}  // namespace keel_llama
