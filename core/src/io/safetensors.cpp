// The safetensors writer (the reader is in safetensors_reader.cpp). Offsets are relative to the
// end of the header; the header is padded with spaces to a multiple of 8 bytes, as the format
// recommends for alignment; tensors are written back to back, so they tile the data.
#include "io/safetensors.h"

#include <fstream>

#include "host/errors.h"
#include "io/durable_files.h"

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
  for (const auto& e : entries) {
    if (e.data) {
      out.write(static_cast<const char*>(e.data), std::streamsize(e.bytes));
      continue;
    }
    const std::vector<float> values = e.produce();
    if (values.size() * sizeof(float) != e.bytes)
      throw KeelError(KEEL_ERR_INTERNAL, path + ": tensor \"" + e.name + "\" produced " +
                                             std::to_string(values.size() * sizeof(float)) + " bytes, its header says " +
                                             std::to_string(e.bytes));
    out.write(reinterpret_cast<const char*>(values.data()), std::streamsize(e.bytes));
  }
  out.close();
  if (!out) throw KeelError(KEEL_ERR_IO, path + ": write failed (disk full?)");
  fsync_path(path);
}

}  // namespace keel
