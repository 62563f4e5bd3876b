// The one way Keel parses config-like JSON text (config files, --set values, checkpoint
// manifests, plugin sections): nesting is bounded while parsing, because nlohmann's copy,
// compare and dump recurse once per level and a file nested ~100k deep would overflow the
// stack far from the parse. A key given twice in one object is refused (nlohmann keeps the
// last one without a word, so `"lr"` written twice would silently train with the second), and
// so is a NUL byte in text (nlohmann takes it for the end of input and ignores what follows).
// Header-only so plugins share it; errors are ConfigError.
#pragma once

#include <nlohmann/json.hpp>

#include <cstring>
#include <set>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace keel_support {

struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Deeper than any real config (Keel's own are under 5 levels), shallow enough for any stack.
constexpr int kMaxJsonDepth = 128;

// Text held whole (a string, a byte vector) is checked for NUL before nlohmann stops at one;
// other inputs (streams, iterators, C strings, which end at a NUL anyway) pass as they are.
template <typename Text>
void refuse_nul_byte(const std::string& origin, const Text& text) {
  if constexpr (std::is_same_v<Text, std::string> || std::is_same_v<Text, std::vector<unsigned char>> ||
                std::is_same_v<Text, std::vector<char>>) {
    const char* begin = reinterpret_cast<const char*>(text.data());
    if (const void* nul = std::memchr(begin, 0, text.size()))
      throw ConfigError(origin + ": a NUL byte at offset " + std::to_string(static_cast<const char*>(nul) - begin) +
                        " (JSON text has none)");
  }
}

// Parses `input` (a string, a stream, an iterator pair: whatever nlohmann::json::parse takes).
// Throws ConfigError "<origin>: JSON nested deeper than 128 levels",
// "<origin>: key \"K\" appears twice in the object at PATH",
// "<origin>: a NUL byte at offset N (JSON text has none)" or
// "<origin>: not valid JSON: <nlohmann's reason>".
template <typename... Input>
nlohmann::json parse_json(const std::string& origin, Input&&... input) {
  (refuse_nul_byte(origin, input), ...);
  struct TooDeep {};
  struct RepeatedKey {
    std::string key, path;
  };
  // The keys seen so far in each open object, innermost last, and the key each one was reached by.
  std::vector<std::set<std::string>> keys_of_open_objects;
  std::vector<std::string> path_to_open_objects;
  std::string last_key;
  auto check_event = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    // depth counts the containers that enclose this one; the top level is 0.
    if ((event == Event::object_start || event == Event::array_start) && depth >= kMaxJsonDepth) throw TooDeep{};
    if (event == Event::object_start) {
      path_to_open_objects.push_back(keys_of_open_objects.empty() ? std::string() : last_key);
      keys_of_open_objects.emplace_back();
    } else if (event == Event::object_end) {
      keys_of_open_objects.pop_back();
      path_to_open_objects.pop_back();
    } else if (event == Event::key) {
      last_key = parsed.get<std::string>();
      if (!keys_of_open_objects.back().insert(last_key).second) {
        std::string path;
        for (size_t i = 1; i < path_to_open_objects.size(); ++i) path += (i > 1 ? "." : "") + path_to_open_objects[i];
        throw RepeatedKey{last_key, path.empty() ? "the top level" : path};
      }
    }
    return true;
  };
  try {
    return nlohmann::json::parse(std::forward<Input>(input)..., check_event);
  } catch (const TooDeep&) {
    throw ConfigError(origin + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  } catch (const RepeatedKey& repeated) {
    throw ConfigError(origin + ": key \"" + repeated.key + "\" appears twice in the object at " + repeated.path +
                      " (JSON keeps one; say each key once)");
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(origin + ": not valid JSON: " + e.what());
  }
}

}  // namespace keel_support
