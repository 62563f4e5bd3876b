// safetensors writer. Offsets are relative to the end of the header; the header is padded
// with spaces to a multiple of 8 bytes, as the format recommends for alignment.
#include "io/safetensors.h"

#include <fstream>

#include "host/errors.h"

namespace keel {

void write_safetensors(const std::string& path, const std::vector<SafetensorsEntry>& entries,
                       const nlohmann::json& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  for (const auto& e : entries) {
    header[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {offset, offset + e.bytes}}};
    offset += e.bytes;
  }
  std::string text = header.dump();
  while (text.size() % 8) text += ' ';
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw KeelError(KEEL_ERR_IO, path + ": cannot write");
  const uint64_t length = text.size();
  out.write(reinterpret_cast<const char*>(&length), sizeof length);  // little-endian hosts only
  out.write(text.data(), std::streamsize(text.size()));
  for (const auto& e : entries) out.write(static_cast<const char*>(e.data), std::streamsize(e.bytes));
  if (!out) throw KeelError(KEEL_ERR_IO, path + ": write failed");
}

}  // namespace keel
