// How the gpt model's parameters appear outside Keel (ABI 0.2's external_name and
// external_config slots): today one format, "huggingface", GPT-2 as transformers'
// GPT2LMHeadModel stores it. Kept apart from the math so a second format is one more table.
#pragma once

#include <keel/model.h>

#include <string>
#include <vector>

namespace keel_gpt {

struct GptConfig;  // gpt_model.hpp

class GptExternalNames {
 public:
  // `keel_names` are the model's parameter names in spec order.
  GptExternalNames(const GptConfig& config, const std::vector<std::string>& keel_names);
  GptExternalNames(const GptExternalNames&) = delete;  // the tables point into hf_names_
  GptExternalNames& operator=(const GptExternalNames&) = delete;

  // Parameter `index` in `format`; throws StatusError (UNIMPLEMENTED for an unknown format,
  // INVALID_ARGUMENT for an index past the last parameter).
  keel_external_tensor tensor(const std::string& format, size_t index) const;
  // The format's config.json text; valid as long as this object.
  const char* config_json(const std::string& format) const;

 private:
  void require_known(const std::string& format) const;

  std::vector<keel_external_tensor> huggingface_;  // by parameter index; names point into hf_names_
  std::vector<std::string> hf_names_;
  std::string hf_config_json_;
};

}  // namespace keel_gpt
