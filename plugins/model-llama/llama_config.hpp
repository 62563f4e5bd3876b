// The llama model's "model" section: dimensions as transformers' LlamaConfig names them, checked
// against each other, with defaults of SmolLM2-135M (a Llama-family model small enough to train
// on a laptop). Read at validate and at create; the same text gives the same config.
#pragma once

#include <cstdint>
#include <string>

#include <keel_support/model/lora.hpp>            // defines: LoraConfig
#include <keel_support/model/qat.hpp>             // defines: QatConfig
#include <keel_support/model/recompute.hpp>       // defines: Recompute
#include <keel_support/model/rope_frequencies.hpp>  // defines: RopeScaling
#include "llama_moe_config.hpp"                      // defines: MoeConfig

namespace keel_llama {

struct LlamaConfig {
  int32_t n_layer = 30;
  int32_t d_model = 576;
  int32_t n_head = 9;
  int32_t n_kv_head = 3;
  int32_t ffn_hidden = 1536;
  int32_t vocab_size = 49152;
  int32_t padded_vocab_size = 49152;  // vocab_size rounded up to a multiple of 128
  int32_t max_seq_len = 2048;
  double rope_theta = 100000.0;
  float rms_eps = 1e-5f;
  bool tie_embeddings = true;
  bool attention_bias = false;  // biases on q, k and v (Qwen2's; o_proj has none)
  bool mlp_bias = false;        // biases on gate, up and down (LlamaConfig.mlp_bias)
  keel_support::RopeScaling rope_scaling;  // factor 0: none
  keel_support::Recompute recompute = keel_support::Recompute::NONE;
  MoeConfig moe;  // n_experts 0: every MLP dense
  keel_support::LoraConfig lora;  // r 0: no adapters, every tensor trains
  keel_support::QatConfig qat;    // bits 0: no fake quantization

  int32_t head_dim() const { return d_model / n_head; }
};

// Reads and checks the section; throws keel_support::ConfigError naming the JSON path.
LlamaConfig parse_llama_config(const char* config_json, const char* json_path);

// The section completed from transformers' LlamaConfig, Qwen2Config, MixtralConfig or
// Qwen2MoeConfig (`external_json`, a config.json of model_type "llama", "qwen2", "mixtral" or
// "qwen2_moe"; llama_moe_config.hpp reads the experts' keys): dimensions the section leaves out are taken,
// those it gives must agree (seq_len at most max_position_embeddings), and features Keel's llama
// lacks are refused (Llama's attention_bias, which biases o_proj too; Qwen2's sliding window).
std::string complete_llama_config(const std::string& format, const char* external_json, const char* config_json,
                                  const char* json_path);

}  // namespace keel_llama
