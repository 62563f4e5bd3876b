// Reads one JSON config section with the error messages Keel promises everywhere: the JSON
// path, what was expected, what was found, and "did you mean" for unknown keys. Header-only
// so plugins use it without linking the core; errors are thrown as ConfigError and turned
// into a keel_status at the ABI boundary by the caller.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace keel_support {

struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Levenshtein distance, for suggestions.
inline size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The closest candidate within a small distance, or "".
inline std::string closest_match(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = std::max<size_t>(2, word.size() / 3) + 1;
  for (const auto& candidate : candidates) {
    size_t d = edit_distance(word, candidate);
    if (d < best_distance) best_distance = d, best = candidate;
  }
  return best;
}

inline std::string json_type_name(const nlohmann::json& v) {
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "a boolean";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "null";
}

// Typed access to one object, remembering which keys were read so finish() can reject the rest.
class JsonSection {
 public:
  JsonSection(nlohmann::json object, std::string path) : object_(std::move(object)), path_(std::move(path)) {
    if (!object_.is_object())
      throw ConfigError(path_ + ": expected an object, found " + json_type_name(object_));
  }

  static JsonSection parse(const char* json_text, const char* path) {
    nlohmann::json parsed;
    try {
      parsed = nlohmann::json::parse(json_text ? json_text : "{}");
    } catch (const std::exception& e) {
      throw ConfigError(std::string(path) + ": not valid JSON: " + e.what());
    }
    return JsonSection(parsed, path);
  }

  const std::string& path() const { return path_; }
  std::string path_of(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  bool has(const std::string& key) { known_.insert(key); return object_.contains(key); }
  const nlohmann::json& raw(const std::string& key) { known_.insert(key); return object_.at(key); }

  template <typename T>
  T get(const std::string& key, const T& fallback) {
    known_.insert(key);
    if (!object_.contains(key)) return fallback;
    return convert<T>(key, object_.at(key));
  }

  template <typename T>
  T require(const std::string& key) {
    known_.insert(key);
    if (!object_.contains(key)) throw ConfigError(path_of(key) + ": required key is missing");
    return convert<T>(key, object_.at(key));
  }

  // A number that must lie in [lo, hi].
  template <typename T>
  T get_in_range(const std::string& key, const T& fallback, T lo, T hi) {
    T value = get<T>(key, fallback);
    if (value < lo || value > hi)
      throw ConfigError(path_of(key) + ": expected a value in [" + std::to_string(lo) + ", " +
                        std::to_string(hi) + "], found " + nlohmann::json(value).dump());
    return value;
  }

  std::string get_choice(const std::string& key, const std::string& fallback,
                         const std::vector<std::string>& choices) {
    std::string value = get<std::string>(key, fallback);
    if (std::find(choices.begin(), choices.end(), value) != choices.end()) return value;
    std::string list;
    for (const auto& c : choices) list += (list.empty() ? "\"" : ", \"") + c + "\"";
    std::string hint = closest_match(value, choices);
    throw ConfigError(path_of(key) + ": expected one of " + list + ", found \"" + value + "\"" +
                      (hint.empty() ? "" : " (did you mean \"" + hint + "\"?)"));
  }

  // Keys read elsewhere (the "plugin" selector) are declared here so finish() accepts them.
  void allow(const std::string& key) { known_.insert(key); }

  // Rejects keys nobody read, suggesting the nearest known one.
  void finish() const {
    std::vector<std::string> known(known_.begin(), known_.end());
    for (auto it = object_.begin(); it != object_.end(); ++it) {
      if (known_.count(it.key())) continue;
      std::string hint = closest_match(it.key(), known);
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      throw ConfigError(path_of(it.key()) + ": unknown key" +
                        (hint.empty() ? "" : " (did you mean \"" + hint + "\"?)") +
                        "; known keys: " + list);
    }
  }

 private:
  template <typename T>
  T convert(const std::string& key, const nlohmann::json& v) const {
    bool ok;
    if constexpr (std::is_same_v<T, bool>) ok = v.is_boolean();
    else if constexpr (std::is_integral_v<T>) ok = v.is_number_integer() || (v.is_number_float() && v.get<double>() == static_cast<double>(static_cast<long long>(v.get<double>())));
    else if constexpr (std::is_floating_point_v<T>) ok = v.is_number();
    else if constexpr (std::is_same_v<T, std::string>) ok = v.is_string();
    else ok = true;
    if (!ok) throw ConfigError(path_of(key) + ": expected " + expected_name<T>() + ", found " + json_type_name(v) + " " + v.dump());
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) return static_cast<T>(v.get<double>());
    else return v.get<T>();
  }

  template <typename T>
  static std::string expected_name() {
    if constexpr (std::is_same_v<T, bool>) return "a boolean";
    else if constexpr (std::is_integral_v<T>) return "an integer";
    else if constexpr (std::is_floating_point_v<T>) return "a number";
    else if constexpr (std::is_same_v<T, std::string>) return "a string";
    else return "a value";
  }

  nlohmann::json object_;
  std::string path_;
  std::set<std::string> known_;
};

}  // namespace keel_support
