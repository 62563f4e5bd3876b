// safetensors writer and reader. The reader takes its input as untrusted: every number of the
// header is checked for type, sign and overflow before it is used. Offsets are relative to the end of the header; the header is padded
// with spaces to a multiple of 8 bytes, as the format recommends for alignment.
#include "io/safetensors.h"

#include <keel_support/json_parse.hpp>

#include <cstring>
#include <fstream>

#include "io/durable_files.h"
#include "io/regular_file.h"

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

namespace {

size_t dtype_bytes(const std::string& dtype) {
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "U8" || dtype == "I8" || dtype == "BOOL") return 1;
  return 0;
}

// entry[key], or a refusal naming the tensor and the missing key.
template <typename Bad>
const nlohmann::json& member(const nlohmann::json& entry, const char* key, const std::string& what, Bad bad) {
  auto found = entry.find(key);
  if (found == entry.end()) throw bad(what + ": \"" + key + "\" is missing");
  return *found;
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path)
    : SafetensorsFile(path, read_regular_file(path, "safetensors file")) {}

SafetensorsFile::SafetensorsFile(const std::string& path, std::vector<unsigned char> bytes)
    : path_(path), bytes_(std::move(bytes)) {
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
  const uint64_t data_start = 8 + header_bytes, data_bytes = bytes_.size() - data_start;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      metadata_ = it.value();
      continue;
    }
    const std::string what = "tensor \"" + it.key() + "\"";
    const auto& entry = it.value();
    if (!entry.is_object()) throw bad(what + ": expected an object with dtype, shape and data_offsets");
    Tensor t;
    const auto& dtype = member(entry, "dtype", what, bad);
    if (!dtype.is_string()) throw bad(what + ": dtype: expected a string, found " + dtype.dump());
    t.dtype = dtype.get<std::string>();
    const size_t element_bytes = dtype_bytes(t.dtype);
    if (element_bytes == 0) throw bad(what + ": unknown dtype " + t.dtype);
    const auto& shape = member(entry, "shape", what, bad);
    if (!shape.is_array()) throw bad(what + ": shape: expected a list of sizes, found " + shape.dump());
    uint64_t elements = 1;
    for (const auto& d : shape) {
      if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<int64_t>() >= 0))
        throw bad(what + ": shape: " + d.dump() + " is not a size (an integer >= 0)");
      const uint64_t size = d.get<uint64_t>();
      if (size > uint64_t(INT64_MAX) || (size != 0 && elements > data_bytes / size))
        throw bad(what + ": shape " + shape.dump() + " holds more elements than the file's " + std::to_string(data_bytes) +
                  " data bytes");
      elements *= size;
      t.shape.push_back(int64_t(size));
    }
    const auto& offsets = member(entry, "data_offsets", what, bad);
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned())
      throw bad(what + ": data_offsets: expected [begin, end] (two integers >= 0), found " + offsets.dump());
    const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    if (begin > end) throw bad(what + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "] end before they begin");
    if (end > data_bytes)
      throw bad("truncated: " + what + " ends at byte " + std::to_string(end) + " of the data but the data has " +
                std::to_string(data_bytes) + " bytes");
    t.data = bytes_.data() + data_start + begin;
    t.bytes = size_t(end - begin);
    const bool too_many = elements > t.bytes / element_bytes;
    if (too_many || elements * element_bytes != t.bytes)
      throw bad(what + ": shape and dtype need " +
                (too_many ? "more than " + std::to_string(t.bytes) : std::to_string(elements * element_bytes)) +
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
  if (begin < 0 || count < 0 || begin > elements || count > elements - begin)
    throw KeelError(KEEL_ERR_IO, path_ + ": tensor \"" + name + "\" has " + std::to_string(elements) +
                                     " elements; " + std::to_string(count) + " elements from element " +
                                     std::to_string(begin) + " were asked for");
  std::memcpy(out, t.data + size_t(begin) * 4, size_t(count) * 4);
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& entry : tensors_) out.push_back(entry.first);
  return out;
}

}  // namespace keel
