// The one way Keel parses config-like JSON text (config files, --set values, checkpoint
// manifests, plugin sections): nesting is bounded while parsing, because nlohmann's copy,
// compare and dump recurse once per level and a file nested ~100k deep would overflow the
// stack far from the parse. Header-only so plugins share it; errors are ConfigError.
#pragma once

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>

namespace keel_support {

struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Deeper than any real config (Keel's own are under 5 levels), shallow enough for any stack.
constexpr int kMaxJsonDepth = 128;

// Parses `input` (a string, a stream, an iterator pair: whatever nlohmann::json::parse takes).
// Throws ConfigError "<origin>: JSON nested deeper than 128 levels" or
// "<origin>: not valid JSON: <nlohmann's reason>".
template <typename... Input>
nlohmann::json parse_json(const std::string& origin, Input&&... input) {
  struct TooDeep {};
  auto bound_depth = [](int depth, nlohmann::json::parse_event_t event, nlohmann::json&) {
    // depth counts the containers that enclose this one; the top level is 0.
    const bool opens = event == nlohmann::json::parse_event_t::object_start ||
                       event == nlohmann::json::parse_event_t::array_start;
    if (opens && depth >= kMaxJsonDepth) throw TooDeep{};
    return true;
  };
  try {
    return nlohmann::json::parse(std::forward<Input>(input)..., bound_depth);
  } catch (const TooDeep&) {
    throw ConfigError(origin + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(origin + ": not valid JSON: " + e.what());
  }
}

}  // namespace keel_support
