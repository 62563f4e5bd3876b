// How a model's parameters appear in the "huggingface" format (model.h external_name and
// external_config): per parameter index the external name and layout, and the config.json text.
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

  // `model` names the model in messages ("the gpt model").
  ExternalNames(std::string model, std::string config_json) : model_(std::move(model)), config_(std::move(config_json)) {}
  ExternalNames(const ExternalNames&) = delete;  // the table points into names_
  ExternalNames& operator=(const ExternalNames&) = delete;

  // The next parameter (in spec order): its external name, whether stored as the 2-D transpose,
  // how many leading rows exist outside Keel (-1: all), whether flattened (keel_external_tensor).
  void add(std::string name, bool transpose = false, int64_t rows = -1, bool flatten = false) {
    names_.push_back(std::move(name));  // a deque: earlier names never move
    keel_external_tensor t{};
    t.struct_size = sizeof t;
    t.name = names_.back().c_str();
    t.transpose = transpose ? 1 : 0;
    t.rows = rows;
    t.flatten = flatten ? 1 : 0;
    tensors_.push_back(t);
  }

  keel_external_tensor tensor(const std::string& format, size_t index) const {
    require_known(format);
    if (index >= tensors_.size())
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "external_name: parameter index " + std::to_string(index) +
                                                       " is past the last parameter (" +
                                                       std::to_string(tensors_.size()) + " parameters)");
    return tensors_[index];
  }
  // A model whose trained function the format cannot hold (a router's selection biases) still
  // reads its tensors from it, but refuses to be written in it, saying why.
  void refuse_export(std::string why) { export_refusal_ = std::move(why); }

  const char* config_json(const std::string& format) const {
    require_known(format);
    if (!export_refusal_.empty()) throw StatusError(KEEL_ERR_UNIMPLEMENTED, export_refusal_);
    return config_.c_str();
  }

 private:
  void require_known(const std::string& format) const {
    if (format != kFormat)
      throw StatusError(KEEL_ERR_UNIMPLEMENTED, "no external format named '" + format + "'; " + model_ +
                                                    " knows: " + kFormat);
  }

  std::string model_, config_;
  std::string export_refusal_;  // empty: the model may be exported
  std::deque<std::string> names_;
  std::vector<keel_external_tensor> tensors_;
};

}  // namespace keel_support
