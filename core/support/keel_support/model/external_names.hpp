// How a model's parameters appear in the "huggingface" format, and in any other the model adds
// (PEFT's adapter folder; model.h external_name and external_config): per parameter index the
// external name and layout, and the format's config file text.
// The model says what each tensor is called; this holds the table and answers the slots,
// refusing another format or an index past the end. Shared by the gpt and llama models;
// installed for third-party ones.
#pragma once

#include <keel/model.h>

#include <deque>
#include <string>
#include <vector>

#include "keel_support/common/abi_guard.hpp"

namespace keel_support {

class ExternalNames {
 public:
  static constexpr const char* kFormat = "huggingface";
  // PEFT's adapter folder (adapter_model.safetensors, adapter_config.json): a LoRA run's adapters
  // under PEFT's keys, every other tensor unnamed (docs/finetuning.md).
  static constexpr const char* kAdapterFormat = "peft";

  // `model` names the model in messages ("the gpt model"); `config_json` is the "huggingface"
  // format's config.json.
  ExternalNames(std::string model, std::string config_json) : model_(std::move(model)) {
    formats_.push_back({kFormat, std::move(config_json), {}, {}});
  }
  ExternalNames(const ExternalNames&) = delete;  // the table points into names_
  ExternalNames& operator=(const ExternalNames&) = delete;

  // A second format the model is written in, with its config file's text; its tensors are added
  // with add_to.
  void add_format(std::string format, std::string config_json) {
    formats_.push_back({std::move(format), std::move(config_json), {}, {}});
  }

  // The next parameter (in spec order) in the "huggingface" format: its external name, whether
  // stored as the 2-D transpose, how many leading rows exist outside Keel (-1: all), whether
  // flattened, whether its leading dimensions are merged (keel_external_tensor). An empty name:
  // not in the format.
  void add(std::string name, bool transpose = false, int64_t rows = -1, bool flatten = false) {
    add_to(kFormat, std::move(name), transpose, rows, flatten);
  }
  void add_to(const std::string& format, std::string name, bool transpose = false, int64_t rows = -1,
              bool flatten = false, bool merge_leading = false) {
    Format& f = find(format);
    f.names.push_back(std::move(name));  // a deque: earlier names never move
    keel_external_tensor t{};
    t.struct_size = sizeof t;
    t.name = f.names.back().c_str();
    t.transpose = transpose ? 1 : 0;
    t.rows = rows;
    t.flatten = flatten ? 1 : 0;
    t.merge_leading = merge_leading ? 1 : 0;
    f.tensors.push_back(t);
  }

  keel_external_tensor tensor(const std::string& format, size_t index) const {
    const Format& f = find(format);
    if (index >= f.tensors.size())
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "external_name: parameter index " + std::to_string(index) +
                                                       " is past the last parameter (" +
                                                       std::to_string(f.tensors.size()) + " parameters)");
    return f.tensors[index];
  }
  // A model whose trained function the format cannot hold (a router's selection biases) still
  // reads its tensors from it, but refuses to be written in it, saying why.
  void refuse_export(std::string why) { export_refusal_ = std::move(why); }

  const char* config_json(const std::string& format) const {
    const Format& f = find(format);
    if (!export_refusal_.empty()) throw StatusError(KEEL_ERR_UNIMPLEMENTED, export_refusal_);
    return f.config.c_str();
  }

 private:
  struct Format {
    std::string name, config;
    std::deque<std::string> names;
    std::vector<keel_external_tensor> tensors;
  };
  const Format& find(const std::string& format) const { return const_cast<ExternalNames*>(this)->find(format); }
  Format& find(const std::string& format) {
    std::string known;
    for (Format& f : formats_) {
      if (f.name == format) return f;
      known += (known.empty() ? "" : ", ") + f.name;
    }
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, "no external format named '" + format + "'; " + model_ + " knows: " + known);
  }

  std::string model_;
  std::string export_refusal_;  // empty: the model may be exported
  std::deque<Format> formats_;  // a deque: each format's names stay where the table points
};

}  // namespace keel_support
