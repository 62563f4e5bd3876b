// Completing a model's config section from an external format's model config (model.h
// complete_config, 0.10): a Hugging Face checkpoint folder's config.json names the dimensions,
// the Keel section may leave them out, and a key both give must agree. The model lists which of
// its keys come from which external key; this does the filling, the comparing and the messages
// naming both values. Used by the gpt and llama models; installed for third-party ones.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "keel_support/common/abi_guard.hpp"
#include "keel_support/common/json_parse.hpp"
#include "keel_support/common/json_section.hpp"

namespace keel_support {

class ExternalConfigMerge {
 public:
  // `where` names the external config in messages ("config.json").
  ExternalConfigMerge(const char* config_json, const char* json_path, const char* external_json, std::string where)
      : path_(json_path ? json_path : "model"), where_(std::move(where)) {
    section_ = parse_json(path_.c_str(), config_json ? config_json : "{}");
    external_ = parse_json(where_.c_str(), external_json ? external_json : "{}");
    if (!section_.is_object()) throw ConfigError(path_ + ": expected an object, found " + json_type_name(section_));
    if (!external_.is_object()) throw ConfigError(where_ + ": expected a JSON object, found " + json_type_name(external_));
  }

  const nlohmann::json& external() const { return external_; }
  bool has_external(const char* key) const { return external_.contains(key) && !external_.at(key).is_null(); }

  // The external config's `key` must be one of `allowed` (an architecture, an activation);
  // `absent_ok`: a missing key passes (transformers' default is then assumed to be allowed).
  void require_one_of(const char* key, const std::vector<std::string>& allowed, bool absent_ok = false) const {
    if (!external_.contains(key)) {
      if (absent_ok) return;
      throw ConfigError(where_ + " has no \"" + key + "\"; " + reader() + " expects " +
                        (allowed.size() == 1 ? "" : "one of ") + list(allowed));
    }
    const nlohmann::json& v = external_.at(key);
    if (!v.is_string() || std::find(allowed.begin(), allowed.end(), v.get<std::string>()) == allowed.end())
      throw ConfigError(where_ + "'s \"" + key + "\" is " + v.dump() + ", but " + reader() + " reads only " +
                        list(allowed));
  }
  // The external config's `key`, when present and not null, must equal `expected` (a feature
  // the model does not have: biases, sliding windows).
  void require_value(const char* key, const nlohmann::json& expected, const std::string& why) const {
    if (!has_external(key) || external_.at(key) == expected) return;
    throw ConfigError(where_ + "'s \"" + key + "\" is " + external_.at(key).dump() + ", but " + reader() +
                      " needs " + expected.dump() + " there (" + why + ")");
  }

  // Keel's `keel_key` from the external `external_key`: taken when the section leaves it out,
  // compared when it gives it (numbers by value: 1e-5 equals 1e-05). A missing external key
  // leaves the section as it is, or takes `fallback` when one is given (transformers' default).
  void take(const char* keel_key, const char* external_key, const nlohmann::json& fallback = nullptr) {
    const nlohmann::json value = has_external(external_key) ? external_.at(external_key) : fallback;
    if (value.is_null()) return;
    take_value(keel_key, value, std::string("\"") + external_key + "\"");
  }
  // As take, for a value the model derived from the external config; `what` names its source.
  void take_value(const char* keel_key, const nlohmann::json& value, const std::string& what) {
    if (!section_.contains(keel_key)) {
      section_[keel_key] = value;
      return;
    }
    if (!same(section_.at(keel_key), value))
      throw ConfigError(path_ + "." + keel_key + " is " + section_.at(keel_key).dump() + ", but " + where_ + "'s " +
                        what + " is " + value.dump() + ": leave " + path_ + "." + keel_key +
                        " out to take the checkpoint's, or name a checkpoint of this shape");
  }
  // Keel's `keel_key` may be at most the external value (a training context shorter than the
  // model's maximum positions); taken when left out.
  void take_at_most(const char* keel_key, const char* external_key) {
    if (!has_external(external_key)) return;
    const nlohmann::json& value = external_.at(external_key);
    if (!section_.contains(keel_key)) {
      section_[keel_key] = value;
      return;
    }
    const nlohmann::json& mine = section_.at(keel_key);
    if (mine.is_number() && value.is_number() && mine.get<double>() > value.get<double>())
      throw ConfigError(path_ + "." + keel_key + " is " + mine.dump() + ", but " + where_ + "'s \"" + external_key +
                        "\" is " + value.dump() + ": expected at most " + value.dump() + ", or leave " + path_ + "." +
                        keel_key + " out to take it");
  }

  std::string result() const { return section_.dump(); }

 private:
  // Who reads the external config, as a sentence's subject: "the gpt model", else "the model section".
  std::string reader() const {
    const auto plugin = section_.find("plugin");
    if (plugin == section_.end() || !plugin->is_string()) return "the " + path_ + " section";
    return "the " + plugin->get<std::string>() + " model";
  }
  static bool same(const nlohmann::json& a, const nlohmann::json& b) {
    if (a.is_number() && b.is_number()) return a.get<double>() == b.get<double>();
    return a == b;
  }
  static std::string list(const std::vector<std::string>& values) {
    std::string out;
    for (const auto& v : values) out += (out.empty() ? "\"" : ", \"") + v + "\"";
    return out;
  }

  std::string path_, where_;
  nlohmann::json section_, external_;
};

// The C slot's output convention (model.h complete_config): as much of `text` as fits in
// capacity with a NUL, and its whole length.
inline void write_text_out(const std::string& text, char* out, size_t capacity, size_t* out_length) {
  if (!out_length) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "complete_config: out_length is NULL");
  *out_length = text.size();
  if (!out || capacity == 0) return;
  const size_t n = std::min(text.size(), capacity - 1);
  std::memcpy(out, text.data(), n);
  out[n] = '\0';
}

}  // namespace keel_support
