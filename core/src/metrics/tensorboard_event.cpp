// Protobuf encoding of the handful of fields a scalar event needs: varint tags and lengths,
// little-endian fixed64 / fixed32 values (wire types 1 and 5), length-delimited strings and
// nested messages (wire type 2).
#include "metrics/tensorboard_event.h"

#include <cstring>

#include "io/crc32c.h"

namespace keel {
namespace {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void put_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out += char((value & 0x7F) | 0x80);
    value >>= 7;
  }
  out += char(value);
}

void put_tag(std::string& out, uint32_t field, WireType type) { put_varint(out, (uint64_t(field) << 3) | type); }

void put_little_endian(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out += char((value >> (8 * i)) & 0xFF);
}

void put_double(std::string& out, uint32_t field, double value) {
  uint64_t bits;
  std::memcpy(&bits, &value, 8);
  put_tag(out, field, kFixed64);
  put_little_endian(out, bits, 8);
}

void put_float(std::string& out, uint32_t field, float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  put_tag(out, field, kFixed32);
  put_little_endian(out, bits, 4);
}

void put_bytes(std::string& out, uint32_t field, const std::string& bytes) {
  put_tag(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

}  // namespace

std::string encode_file_version_event(double wall_time_s, const std::string& version) {
  std::string event;
  put_double(event, 1, wall_time_s);
  put_bytes(event, 3, version);
  return event;
}

std::string encode_scalar_event(double wall_time_s, int64_t step, const std::string& tag, float value) {
  std::string summary_value;
  put_bytes(summary_value, 1, tag);
  put_float(summary_value, 2, value);
  std::string summary;
  put_bytes(summary, 1, summary_value);
  std::string event;
  put_double(event, 1, wall_time_s);
  put_tag(event, 2, kVarint);
  put_varint(event, uint64_t(step));  // int64: negatives take ten bytes, as protobuf specifies
  put_bytes(event, 5, summary);
  return event;
}

uint32_t masked_crc32c(const void* data, size_t bytes) {
  const uint32_t crc = crc32c(data, bytes);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string tfrecord_frame(const std::string& data) {
  std::string length;
  put_little_endian(length, data.size(), 8);
  std::string record = length;
  put_little_endian(record, masked_crc32c(length.data(), length.size()), 4);
  record += data;
  put_little_endian(record, masked_crc32c(data.data(), data.size()), 4);
  return record;
}

}  // namespace keel
