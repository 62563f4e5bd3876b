// safetensors writer. Offsets are relative to the end of the header; the header is padded
// with spaces to a multiple of 8 bytes, as the format recommends for alignment.
#include "io/safetensors.h"

#include <keel_support/json_parse.hpp>

#include <cstring>
#include <fstream>

#include "io/durable_files.h"

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
  out.close();
  if (!out) throw KeelError(KEEL_ERR_IO, path + ": write failed (disk full?)");
  fsync_path(path);
}

namespace {

size_t dtype_bytes(const std::string& dtype) {
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "U8" || dtype == "I8" || dtype == "BOOL") return 1;
  return 0;
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw KeelError(KEEL_ERR_IO, path + ": cannot open safetensors file");
  const std::streamsize size = in.tellg();
  in.seekg(0);
  bytes_.resize(size_t(size));
  in.read(reinterpret_cast<char*>(bytes_.data()), size);
  if (!in) throw KeelError(KEEL_ERR_IO, path + ": read failed");
  auto bad = [&](const std::string& why) { return KeelError(KEEL_ERR_IO, path + ": not a valid safetensors file: " + why); };
  if (bytes_.size() < 8) throw bad("truncated: " + std::to_string(bytes_.size()) + " bytes, smaller than the 8-byte header length");
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, bytes_.data(), 8);
  if (header_bytes > bytes_.size() - 8)
    throw bad("truncated: the header claims " + std::to_string(header_bytes) + " bytes but the file has " +
              std::to_string(bytes_.size()));
  nlohmann::json header;
  try {
    header = keel_support::parse_json("the JSON header", bytes_.begin() + 8, bytes_.begin() + 8 + long(header_bytes));
  } catch (const keel_support::ConfigError& e) {
    throw bad(e.what());
  }
  if (!header.is_object()) throw bad("the header is not a JSON object");
  const size_t data_start = 8 + header_bytes, data_bytes = bytes_.size() - data_start;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      metadata_ = it.value();
      continue;
    }
    const auto& entry = it.value();
    Tensor t;
    try {
      t.dtype = entry.at("dtype").get<std::string>();
      t.shape = entry.at("shape").get<std::vector<int64_t>>();
      auto offsets = entry.at("data_offsets").get<std::vector<uint64_t>>();
      if (offsets.size() != 2 || offsets[0] > offsets[1]) throw bad("tensor \"" + it.key() + "\": bad data_offsets");
      if (offsets[1] > data_bytes)
        throw bad("truncated: tensor \"" + it.key() + "\" ends at byte " + std::to_string(offsets[1]) +
                  " of the data but the data has " + std::to_string(data_bytes) + " bytes");
      t.data = bytes_.data() + data_start + offsets[0];
      t.bytes = offsets[1] - offsets[0];
    } catch (const nlohmann::json::exception& e) {
      throw bad("tensor \"" + it.key() + "\": " + e.what());
    }
    size_t element_bytes = dtype_bytes(t.dtype), elements = 1;
    for (int64_t d : t.shape) elements *= size_t(d);
    if (element_bytes == 0) throw bad("tensor \"" + it.key() + "\": unknown dtype " + t.dtype);
    if (elements * element_bytes != t.bytes)
      throw bad("tensor \"" + it.key() + "\": shape and dtype need " + std::to_string(elements * element_bytes) +
                " bytes but its range holds " + std::to_string(t.bytes));
    tensors_.emplace(it.key(), t);
  }
}

const SafetensorsFile::Tensor& SafetensorsFile::tensor(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) throw KeelError(KEEL_ERR_NOT_FOUND, path_ + ": no tensor named \"" + name + "\"");
  return it->second;
}

void SafetensorsFile::read_f32(const std::string& name, int64_t begin, int64_t count, float* out) const {
  const Tensor& t = tensor(name);
  if (t.dtype != "F32") throw KeelError(KEEL_ERR_IO, path_ + ": tensor \"" + name + "\" is " + t.dtype + ", expected F32");
  const int64_t elements = int64_t(t.bytes / 4);
  if (begin < 0 || count < 0 || begin + count > elements)
    throw KeelError(KEEL_ERR_IO, path_ + ": tensor \"" + name + "\" has " + std::to_string(elements) +
                                     " elements; elements [" + std::to_string(begin) + ", " + std::to_string(begin + count) +
                                     ") were asked for");
  std::memcpy(out, t.data + size_t(begin) * 4, size_t(count) * 4);
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& entry : tensors_) out.push_back(entry.first);
  return out;
}

}  // namespace keel
