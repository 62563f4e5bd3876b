// How the llama model's parameters appear outside Keel (the external_name and external_config
// slots): the "huggingface" format, transformers' LlamaForCausalLM. Keel's names are already
// Hugging Face's and its (out, in) layouts are nn.Linear's, so the table only cuts the padded
// vocabulary rows of the embedding and the head.
#pragma once

#include <keel/model.h>

#include <string>
#include <vector>

namespace keel_llama {

struct LlamaConfig;  // llama_config.hpp

class LlamaExternalNames {
 public:
  LlamaExternalNames(const LlamaConfig& config, const std::vector<std::string>& keel_names);
  LlamaExternalNames(const LlamaExternalNames&) = delete;  // the table points into names_
  LlamaExternalNames& operator=(const LlamaExternalNames&) = delete;

  keel_external_tensor tensor(const std::string& format, size_t index) const;
  const char* config_json(const std::string& format) const;

 private:
  void require_known(const std::string& format) const;

  std::vector<std::string> names_;
  std::vector<keel_external_tensor> huggingface_;
  std::string hf_config_json_;
};

}  // namespace keel_llama
