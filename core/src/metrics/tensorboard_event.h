// TensorBoard's wire format, written by hand so the core needs no protobuf library: the few
// fields of tensorflow.Event and Summary that scalars use, and TFRecord's checksummed framing.
// Field numbers are those of tensorflow/core/util/event.proto and framework/summary.proto.
#pragma once

#include <cstdint>
#include <string>

namespace keel {

// Event{wall_time: 1 (double), step: 2 (int64), file_version: 3 (string)}: the first record.
std::string encode_file_version_event(double wall_time_s, const std::string& version = "brain.Event:2");

// Event{wall_time, step, summary: 5 {value: 1 {tag: 1 (string), simple_value: 2 (float)}}}.
std::string encode_scalar_event(double wall_time_s, int64_t step, const std::string& tag, float value);

// TFRecord's checksum: CRC-32C rotated right by 15 bits plus 0xa282ead8, so a CRC stored over
// data that itself holds CRCs does not checksum to a trivial value.
uint32_t masked_crc32c(const void* data, size_t bytes);

// uint64 length, masked CRC of those 8 bytes, the data, masked CRC of the data (little-endian).
std::string tfrecord_frame(const std::string& data);

}  // namespace keel
