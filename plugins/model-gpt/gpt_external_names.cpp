// The "huggingface" format: transformers' GPT2LMHeadModel names ("transformer.h.0.attn.c_attn.weight")
// and layouts. HF's GPT-2 uses Conv1D, which stores a linear map as (in, out), the transpose of
// Keel's (out, in); HF's wte has exactly vocab_size rows, so Keel's padded rows are cut. The
// lm_head is tied to wte on both sides, so it has no entry of its own. A LoRA run's adapters are
// PEFT's adapter folder ("peft"), under PEFT's keys for GPT-2.
#include "gpt_external_names.hpp"
#include "gpt_model.hpp"  // defines: GptConfig

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <utility>

namespace keel_gpt {

namespace {

struct BlockName {
  const char* keel;  // after "h.<i>."
  const char* hf;    // after "transformer.h.<i>."
  bool transpose;
  bool flatten = false;  // Keel's (3, C) qkv bias is HF's (3C)
};

// Every tensor of a transformer block; the weights of the four Conv1D layers are transposed.
const BlockName kBlockNames[] = {
    {"ln_1.weight", "ln_1.weight", false},          {"ln_1.bias", "ln_1.bias", false},
    {"attn.qkv.weight", "attn.c_attn.weight", true}, {"attn.qkv.bias", "attn.c_attn.bias", false, true},
    {"attn.proj.weight", "attn.c_proj.weight", true}, {"attn.proj.bias", "attn.c_proj.bias", false},
    {"ln_2.weight", "ln_2.weight", false},          {"ln_2.bias", "ln_2.bias", false},
    {"mlp.fc.weight", "mlp.c_fc.weight", true},     {"mlp.fc.bias", "mlp.c_fc.bias", false},
    {"mlp.proj.weight", "mlp.c_proj.weight", true}, {"mlp.proj.bias", "mlp.c_proj.bias", false},
};

struct HfName {
  std::string name;
  bool transpose = false;
  bool cut_to_vocab = false;
  bool flatten = false;
};

HfName huggingface_name(const std::string& keel) {
  if (keel == "wte") return {"transformer.wte.weight", false, true};
  if (keel == "wpe") return {"transformer.wpe.weight", false, false};
  if (keel == "ln_f.weight" || keel == "ln_f.bias") return {"transformer." + keel, false, false};
  if (keel.rfind("h.", 0) == 0) {
    const size_t dot = keel.find('.', 2);
    if (dot != std::string::npos) {
      const std::string block = keel.substr(0, dot + 1), rest = keel.substr(dot + 1);  // "h.3.", "attn.qkv.weight"
      for (const auto& n : kBlockNames)
        if (rest == n.keel) return {"transformer." + block + n.hf, n.transpose, false, n.flatten};
    }
  }
  throw std::logic_error("gpt external names: no Hugging Face name for parameter '" + keel + "'");
}

// A LoRA factor's PEFT key: "h.3.attn.qkv.lora_B.weight" is
// "base_model.model.transformer.h.3.attn.c_attn.lora_B.weight"; empty for any other tensor.
std::string peft_name(const std::string& keel) {
  const size_t at = keel.find(".lora_");
  if (at == std::string::npos) return "";
  const std::string module = huggingface_name(keel.substr(0, at) + ".weight").name;  // "transformer.h.3.attn.c_attn.weight"
  return "base_model.model." + module.substr(0, module.size() - std::string(".weight").size()) + keel.substr(at);
}


std::string huggingface_config(const GptConfig& c) {
  // GPT2Config's fields (transformers/models/gpt2/configuration_gpt2.py). Keel trains without
  // dropout, so the exported model has none either.
  nlohmann::json j = {
      {"model_type", "gpt2"},
      {"architectures", {"GPT2LMHeadModel"}},
      {"vocab_size", c.vocab_size},
      {"n_positions", c.max_seq_len},
      {"n_ctx", c.max_seq_len},
      {"n_embd", c.d_model},
      {"n_layer", c.n_layer},
      {"n_head", c.n_head},
      {"n_inner", nullptr},  // 4 * n_embd
      {"activation_function", "gelu_new"},  // the tanh approximation Keel's GELU uses
      {"layer_norm_epsilon", 1e-5},
      {"resid_pdrop", 0.0},
      {"embd_pdrop", 0.0},
      {"attn_pdrop", 0.0},
      {"scale_attn_weights", true},
      {"scale_attn_by_inverse_layer_idx", false},
      {"reorder_and_upcast_attn", false},
      {"tie_word_embeddings", true},
      {"initializer_range", 0.02},
      {"use_cache", true},
      {"torch_dtype", "float32"},
  };
  // <|endoftext|> exists only in GPT-2's own tokenizer; another vocabulary has no known id.
  if (c.vocab_size == 50257) j["bos_token_id"] = j["eos_token_id"] = 50256;
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

std::unique_ptr<keel_support::ExternalNames> gpt_external_names(const GptConfig& config,
                                                                const std::vector<std::string>& keel_names) {
  auto names = std::make_unique<keel_support::ExternalNames>("the gpt model", huggingface_config(config));
  // LoRA's adapters are no tensor of the transformers model, and the rest is none of PEFT's
  // adapter folder (as in the llama model).
  const char* peft = keel_support::ExternalNames::kAdapterFormat;
  if (config.lora.enabled()) names->add_format(peft, keel_support::peft_adapter_config(config.lora, /*fan_in_fan_out=*/true));
  for (const auto& name : keel_names) {
    const std::string adapter = peft_name(name);
    if (config.lora.enabled())  // qkv's B, (3, C, r) in Keel, is PEFT's (3C, r)
      names->add_to(peft, adapter, false, -1, false, name.find(".attn.qkv.lora_B.") != std::string::npos);
    if (!adapter.empty()) {
      names->add("");
      continue;
    }
    const HfName m = huggingface_name(name);
    names->add(m.name, m.transpose, m.cut_to_vocab ? config.vocab_size : -1, m.flatten);
  }
  return names;
}

}  // namespace keel_gpt
