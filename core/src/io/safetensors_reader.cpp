// The safetensors reader. Its input is untrusted: every number of the header is checked for
// type, sign and overflow before it is used, the header length is bounded before anything is
// allocated, and the tensors must tile the data exactly, as Hugging Face's reader requires: a
// stray byte before the data would otherwise shift every tensor, and two tensors could share
// bytes, and training would go on from wrong values without a word.
#include "io/safetensors.h"

#include <keel_support/common/json_parse.hpp>

#include <algorithm>
#include <cstring>
#include <new>

#include "host/errors.h"

namespace keel {
namespace {

size_t dtype_bytes(const std::string& dtype) {
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "U8" || dtype == "I8" || dtype == "BOOL") return 1;
  return 0;
}

KeelError not_valid(const std::string& path, const std::string& why) {
  return KeelError(KEEL_ERR_IO, path + ": not a valid safetensors file: " + why);
}

// entry[key], or a refusal naming the tensor and the missing key.
const nlohmann::json& member(const nlohmann::json& entry, const char* key, const std::string& what,
                             const std::string& path) {
  auto found = entry.find(key);
  if (found == entry.end()) throw not_valid(path, what + ": \"" + key + "\" is missing");
  return *found;
}

std::string range_text(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

// The tensors' byte ranges, sorted, must run from byte 0 to data_bytes with no gap and no
// overlap (a zero-byte tensor sits between two others).
void check_tiling(const std::map<std::string, SafetensorsFile::Tensor>& tensors, uint64_t data_bytes,
                  const std::string& path) {
  using Entry = std::pair<const std::string*, const SafetensorsFile::Tensor*>;
  std::vector<Entry> sorted;
  for (const auto& [name, tensor] : tensors) sorted.emplace_back(&name, &tensor);
  std::stable_sort(sorted.begin(), sorted.end(), [](const Entry& a, const Entry& b) {
    return std::make_pair(a.second->data_offset, a.second->bytes) < std::make_pair(b.second->data_offset, b.second->bytes);
  });
  uint64_t next = 0;
  const Entry* previous = nullptr;
  for (const Entry& entry : sorted) {
    const uint64_t begin = entry.second->data_offset, end = begin + entry.second->bytes;
    if (begin > next)
      throw not_valid(path, "bytes [" + std::to_string(next) + ", " + std::to_string(begin) +
                                ") of the data belong to no tensor (the next, tensor \"" + *entry.first +
                                "\", begins at byte " + std::to_string(begin) +
                                "); expected the tensors' data_offsets to cover the data exactly, from byte 0");
    if (begin < next)
      throw not_valid(path, "tensor \"" + *entry.first + "\" (data_offsets " + range_text(begin, end) +
                                ") overlaps tensor \"" + *previous->first + "\" (data_offsets " +
                                range_text(previous->second->data_offset,
                                           previous->second->data_offset + previous->second->bytes) +
                                "); expected each byte of the data to belong to one tensor");
    next = end;
    previous = &entry;
  }
  if (next != data_bytes)
    throw not_valid(path, "bytes [" + std::to_string(next) + ", " + std::to_string(data_bytes) +
                              ") of the data belong to no tensor; expected the tensors' data_offsets to cover the "
                              "data exactly, ending where the file ends");
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path, Symlinks symlinks) : path_(path) {
  const std::string what = "safetensors file";
  FileDescriptor file(open_regular_file(path, what, symlinks));
  const uint64_t size = file_size(file.fd, path, what);
  bytes_.resize(size_t(std::min<uint64_t>(size, 8)));
  read_exactly(file.fd, bytes_.data(), bytes_.size(), path, what);
  const uint64_t header_bytes = checked_header_bytes(size);
  bytes_.resize(size_t(8 + header_bytes));  // at most 8 + kMaxSafetensorsHeaderBytes
  read_exactly(file.fd, bytes_.data() + 8, size_t(header_bytes), path, what);
  parse_header(header_bytes, size);
  // Only now, with every range checked against the file's size, is the data read.
  try {
    bytes_.resize(size_t(size));
  } catch (const std::bad_alloc&) {
    throw KeelError(KEEL_ERR_IO, path + ": " + what + " is " + std::to_string(size) +
                                     " bytes, more than this process can hold in memory");
  }
  read_exactly(file.fd, bytes_.data() + 8 + header_bytes, size_t(size - 8 - header_bytes), path, what);
  point_tensors_at_data(header_bytes);
}

SafetensorsFile::SafetensorsFile(const std::string& path, std::vector<unsigned char> bytes)
    : path_(path), bytes_(std::move(bytes)) {
  const uint64_t header_bytes = checked_header_bytes(bytes_.size());
  parse_header(header_bytes, bytes_.size());
  point_tensors_at_data(header_bytes);
}

uint64_t SafetensorsFile::checked_header_bytes(uint64_t file_bytes) const {
  if (file_bytes < 8)
    throw not_valid(path_, "truncated: " + std::to_string(file_bytes) + " bytes, smaller than the 8-byte header length");
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, bytes_.data(), 8);  // little-endian hosts only
  if (header_bytes < 2)
    throw not_valid(path_, "the header length is " + std::to_string(header_bytes) +
                               "; expected at least the 2 bytes of an empty JSON object");
  if (header_bytes > kMaxSafetensorsHeaderBytes)
    throw not_valid(path_, "the header length " + std::to_string(header_bytes) + " is more than the " +
                               std::to_string(kMaxSafetensorsHeaderBytes) + " bytes a header may have");
  if (header_bytes > file_bytes - 8)
    throw not_valid(path_, "truncated: the header claims " + std::to_string(header_bytes) + " bytes but the file has " +
                               std::to_string(file_bytes));
  return header_bytes;
}

void SafetensorsFile::parse_header(uint64_t header_bytes, uint64_t file_bytes) {
  const std::string& path = path_;
  nlohmann::json header;
  try {
    header = keel_support::parse_json("the JSON header", bytes_.begin() + 8, bytes_.begin() + 8 + long(header_bytes));
  } catch (const keel_support::ConfigError& e) {
    throw not_valid(path, e.what());
  }
  if (!header.is_object()) throw not_valid(path, "the header is not a JSON object");
  const uint64_t data_bytes = file_bytes - 8 - header_bytes;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      metadata_ = it.value();
      continue;
    }
    const std::string what = "tensor \"" + it.key() + "\"";
    const auto& entry = it.value();
    if (!entry.is_object()) throw not_valid(path, what + ": expected an object with dtype, shape and data_offsets");
    Tensor t;
    const auto& dtype = member(entry, "dtype", what, path);
    if (!dtype.is_string()) throw not_valid(path, what + ": dtype: expected a string, found " + dtype.dump());
    t.dtype = dtype.get<std::string>();
    const size_t element_bytes = dtype_bytes(t.dtype);
    if (element_bytes == 0) throw not_valid(path, what + ": unknown dtype " + t.dtype);
    const auto& shape = member(entry, "shape", what, path);
    if (!shape.is_array()) throw not_valid(path, what + ": shape: expected a list of sizes, found " + shape.dump());
    uint64_t elements = 1;
    for (const auto& d : shape) {
      if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<int64_t>() >= 0))
        throw not_valid(path, what + ": shape: " + d.dump() + " is not a size (an integer >= 0)");
      const uint64_t size = d.get<uint64_t>();
      if (size > uint64_t(INT64_MAX) || (size != 0 && elements > data_bytes / size))
        throw not_valid(path, what + ": shape " + shape.dump() + " holds more elements than the file's " +
                                  std::to_string(data_bytes) + " data bytes");
      elements *= size;
      t.shape.push_back(int64_t(size));
    }
    const auto& offsets = member(entry, "data_offsets", what, path);
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned())
      throw not_valid(path, what + ": data_offsets: expected [begin, end] (two integers >= 0), found " + offsets.dump());
    const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    if (begin > end) throw not_valid(path, what + ": data_offsets " + range_text(begin, end) + " end before they begin");
    if (end > data_bytes)
      throw not_valid(path, "truncated: " + what + " ends at byte " + std::to_string(end) + " of the data but the data has " +
                                std::to_string(data_bytes) + " bytes");
    t.data_offset = begin;
    t.bytes = size_t(end - begin);
    const bool too_many = elements > t.bytes / element_bytes;
    if (too_many || elements * element_bytes != t.bytes)
      throw not_valid(path, what + ": shape and dtype need " +
                                (too_many ? "more than " + std::to_string(t.bytes) : std::to_string(elements * element_bytes)) +
                                " bytes but its range holds " + std::to_string(t.bytes));
    tensors_.emplace(it.key(), t);
  }
  check_tiling(tensors_, data_bytes, path);
}

void SafetensorsFile::point_tensors_at_data(uint64_t header_bytes) {
  for (auto& entry : tensors_) entry.second.data = bytes_.data() + 8 + header_bytes + entry.second.data_offset;
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

namespace {

float from_bf16(uint16_t bits) {
  const uint32_t wide = uint32_t(bits) << 16;
  float out;
  std::memcpy(&out, &wide, 4);
  return out;
}

// IEEE half to single, subnormals, infinities and NaN included.
float from_f16(uint16_t bits) {
  const uint32_t sign = uint32_t(bits & 0x8000u) << 16, exponent = (bits >> 10) & 0x1fu, mantissa = bits & 0x3ffu;
  uint32_t wide;
  if (exponent == 0x1f) {
    wide = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    wide = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    wide = sign;
  } else {  // subnormal: normalise
    uint32_t e = 113, m = mantissa;
    while (!(m & 0x400u)) m <<= 1, --e;
    wide = sign | (e << 23) | ((m & 0x3ffu) << 13);
  }
  float out;
  std::memcpy(&out, &wide, 4);
  return out;
}

}  // namespace

void SafetensorsFile::read_as_f32(const std::string& name, float* out) const {
  const Tensor& t = tensor(name);
  if (t.dtype == "F32") return read_f32(name, 0, int64_t(t.bytes / 4), out);
  if (t.dtype != "BF16" && t.dtype != "F16")
    throw KeelError(KEEL_ERR_IO, path_ + ": tensor \"" + name + "\" is " + t.dtype + "; expected F32, BF16 or F16");
  const bool bf16 = t.dtype == "BF16";
  for (size_t i = 0; i < t.bytes / 2; ++i) {
    const uint16_t bits = uint16_t(t.data[2 * i] | (t.data[2 * i + 1] << 8));  // little-endian
    out[i] = bf16 ? from_bf16(bits) : from_f16(bits);
  }
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& entry : tensors_) out.push_back(entry.first);
  return out;
}

}  // namespace keel
