// How the llama model's parameters appear outside Keel (the external_name and external_config
// slots): the "huggingface" format, transformers' LlamaForCausalLM. Keel's names are already
// Hugging Face's and its (out, in) layouts are nn.Linear's, so the table only cuts the padded
// vocabulary rows of the embedding and the head.
#pragma once

#include <keel/model.h>
#include <keel_support/model/external_names.hpp>

#include <memory>
#include <string>
#include <vector>

namespace keel_llama {

struct LlamaConfig;  // llama_config.hpp

// The "huggingface" table of the parameters `keel_names` (in spec order).
std::unique_ptr<keel_support::ExternalNames> llama_external_names(const LlamaConfig& config,
                                                                  const std::vector<std::string>& keel_names);

}  // namespace keel_llama
