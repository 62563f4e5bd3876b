// Reads one JSON config section with the error messages Keel promises everywhere: the JSON
// path, what was expected, what was found, and "did you mean" for unknown keys. Header-only
// so plugins use it without linking the core; errors are thrown as ConfigError and turned
// into a keel_status at the ABI boundary by the caller.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "keel_support/common/json_parse.hpp"  // defines: ConfigError, parse_json

namespace keel_support {

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

// Whether the JSON number `v` is exactly an integer in [lo, hi]; if so, stores it in `out`.
// Compares without passing through a double, so 2^64-1 and 2^31 are judged as written. A
// number written with a fraction or exponent (1e3) counts when its value is a whole number.
template <typename T>
bool integer_in_range(const nlohmann::json& v, T lo, T hi, T& out) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
  bool negative = false;
  uint64_t magnitude = 0;  // |value|
  if (v.is_number_unsigned()) {
    magnitude = v.get<uint64_t>();
  } else if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    negative = i < 0;
    magnitude = negative ? uint64_t(0) - uint64_t(i) : uint64_t(i);
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) >= 18446744073709551616.0) return false;  // 2^64
    negative = d < 0;
    magnitude = uint64_t(std::fabs(d));
  } else {
    return false;
  }
  if (negative) {
    if constexpr (std::is_unsigned_v<T>) return false;
    else {
      // lo and hi are >= INT64_MIN; compare magnitudes of negatives as unsigned.
      const uint64_t lo_magnitude = lo < 0 ? uint64_t(0) - uint64_t(int64_t(lo)) : 0;
      if (lo >= 0 || magnitude > lo_magnitude) return false;
      if (hi < 0 && magnitude < uint64_t(0) - uint64_t(int64_t(hi))) return false;
      out = T(int64_t(uint64_t(0) - magnitude));
      return true;
    }
  }
  if constexpr (std::is_signed_v<T>) {
    if (hi < 0 || (lo > 0 && magnitude < uint64_t(lo))) return false;
  } else if (magnitude < uint64_t(lo)) {
    return false;
  }
  if (magnitude > uint64_t(hi)) return false;
  out = T(magnitude);
  return true;
}

// A bound as people write it: 4096, 0.001, 1e+30.
template <typename T>
std::string bound_text(T value) {
  if constexpr (std::is_integral_v<T>) return std::to_string(value);
  else if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  else return nlohmann::json(value).dump();
}

// Typed access to one object, remembering which keys were read so finish() can reject the rest.
class JsonSection {
 public:
  JsonSection(nlohmann::json object, std::string path) : object_(std::move(object)), path_(std::move(path)) {
    if (!object_.is_object())
      throw ConfigError(path_ + ": expected an object, found " + json_type_name(object_));
  }

  static JsonSection parse(const char* json_text, const char* path) {
    return JsonSection(parse_json(path, json_text ? json_text : "{}"), path);
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

  // A number that must lie in [lo, hi]. For integer types the check is exact, on the number
  // as written: "expected a value in [1, 4096], found 2147483648".
  template <typename T>
  T get_in_range(const std::string& key, const T& fallback, T lo, T hi) {
    known_.insert(key);
    if (!object_.contains(key)) return fallback;
    const nlohmann::json& v = object_.at(key);
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      require_integer(key, v);
      T value{};
      if (!integer_in_range<T>(v, lo, hi, value)) throw out_of_range(key, v, lo, hi);
      return value;
    } else {
      T value = convert<T>(key, v);
      if (!(value >= lo && value <= hi)) throw out_of_range(key, v, lo, hi);
      return value;
    }
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
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      require_integer(key, v);
      T value{};
      if (!integer_in_range<T>(v, std::numeric_limits<T>::min(), std::numeric_limits<T>::max(), value))
        throw out_of_range(key, v, std::numeric_limits<T>::min(), std::numeric_limits<T>::max());
      return value;
    } else {
      bool ok;
      if constexpr (std::is_same_v<T, bool>) ok = v.is_boolean();
      else if constexpr (std::is_floating_point_v<T>) ok = v.is_number();
      else if constexpr (std::is_same_v<T, std::string>) ok = v.is_string();
      else ok = true;
      if (!ok) throw wrong_type(key, v, expected_name<T>());
      return v.get<T>();
    }
  }

  // Integers: a number with no fractional part; a fraction is a wrong type, not a range error.
  void require_integer(const std::string& key, const nlohmann::json& v) const {
    const bool whole = v.is_number_integer() ||
                       (v.is_number_float() && std::isfinite(v.get<double>()) && v.get<double>() == std::floor(v.get<double>()));
    if (!whole) throw wrong_type(key, v, "an integer");
  }

  ConfigError wrong_type(const std::string& key, const nlohmann::json& v, const std::string& expected) const {
    return ConfigError(path_of(key) + ": expected " + expected + ", found " + json_type_name(v) + " " + v.dump());
  }

  template <typename T>
  ConfigError out_of_range(const std::string& key, const nlohmann::json& v, T lo, T hi) const {
    return ConfigError(path_of(key) + ": expected a value in [" + bound_text(lo) + ", " + bound_text(hi) + "], found " +
                       v.dump());
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
