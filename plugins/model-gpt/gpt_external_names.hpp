// How the gpt model's parameters appear outside Keel (ABI 0.2's external_name and
// external_config slots): today one format, "huggingface", GPT-2 as transformers'
// GPT2LMHeadModel stores it. Kept apart from the math so a second format is one more table.
#pragma once

#include <keel/model.h>
#include <keel_support/model/external_names.hpp>

#include <memory>
#include <string>
#include <vector>

namespace keel_gpt {

struct GptConfig;  // gpt_model.hpp

// The "huggingface" table of the parameters `keel_names` (in spec order).
std::unique_ptr<keel_support::ExternalNames> gpt_external_names(const GptConfig& config,
                                                                const std::vector<std::string>& keel_names);

}  // namespace keel_gpt
