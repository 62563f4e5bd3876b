// safetensors files (an 8-byte little-endian header length, a JSON header, raw little-endian
// data): the tensor format of checkpoints, exports and test probes.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace keel {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;              // "F32", "I32"
  std::vector<int64_t> shape;
  const void* data = nullptr;     // borrowed until write_safetensors returns
  size_t bytes = 0;
};

// Writes the file in one pass; metadata values must be strings.
void write_safetensors(const std::string& path, const std::vector<SafetensorsEntry>& entries,
                       const nlohmann::json& metadata = nlohmann::json::object());

}  // namespace keel
