// The llama model's config: each key bounded, the relations between them (heads dividing the
// width, key/value heads dividing the heads, an even head dimension for rope) refused with both
// values named, and Llama 3's rope_scaling read as config.json writes it.
#include "llama_config.hpp"

#include <keel_support/json_parse.hpp>
#include <keel_support/json_section.hpp>

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
  c.rope_scaling = parse_rope_scaling(section);
  c.recompute = keel_support::parse_recompute(section);
  section.finish();
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
  c.padded_vocab_size = (c.vocab_size + 127) / 128 * 128;
  return c;
}

}  // namespace keel_llama
