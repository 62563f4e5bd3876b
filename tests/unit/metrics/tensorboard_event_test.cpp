// TensorBoard's bytes, derived by hand from the protobuf and TFRecord specifications, so a
// mistake in the encoder cannot be copied into the expectation.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "io/crc32c.h"
#include "metrics/tensorboard_event.h"

namespace keel {
namespace {

std::string bytes(std::initializer_list<int> values) {
  std::string out;
  for (int v : values) out += char(v);
  return out;
}

TEST(MaskedCrc32c, KnownVectors) {
  // The CRC-32C check value (RFC 3720 B.4 lists the same polynomial's vectors).
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  const std::string zeros(32, '\0'), ones(32, '\xff');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);  // RFC 3720 B.4: 32 bytes of 00
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62A8AB43u);    // RFC 3720 B.4: 32 bytes of FF
  // Mask of 0xE3069283: rotate right 15 = (0xE3069283 >> 15) | (0xE3069283 << 17)
  //   = 0x0001C60D | 0x25060000 = 0x2507C60D; + 0xA282EAD8 = 0xC78AB0E5 (no carry out).
  EXPECT_EQ(masked_crc32c("123456789", 9), 0xC78AB0E5u);
}

TEST(TensorBoardEvent, ScalarEventByteForByte) {
  // Value{tag "a/b", simple_value 2.0f}:
  //   0x0A = field 1, wire type 2; 0x03 = length; "a/b"
  //   0x15 = field 2, wire type 5 (fixed32); 2.0f = 0x40000000 little-endian = 00 00 00 40
  const std::string value = bytes({0x0A, 0x03, 'a', '/', 'b', 0x15, 0x00, 0x00, 0x00, 0x40});
  // Summary{value}: 0x0A = field 1, wire type 2; length 10.
  const std::string summary = bytes({0x0A, 0x0A}) + value;
  // Event{wall_time 1.5, step 300, summary}:
  //   0x09 = field 1, wire type 1 (fixed64); 1.5 = 0x3FF8000000000000 little-endian
  //   0x10 = field 2, wire type 0 (varint); 300 = 0b10_0101100 → 0xAC (low 7 bits | 0x80), 0x02
  //   0x2A = field 5, wire type 2; length 12.
  const std::string expected = bytes({0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xF8, 0x3F, 0x10, 0xAC, 0x02, 0x2A, 0x0C}) +
                               summary;
  ASSERT_EQ(expected.size(), 26u);
  EXPECT_EQ(encode_scalar_event(1.5, 300, "a/b", 2.0f), expected);
}

TEST(TensorBoardEvent, FileVersionEventByteForByte) {
  // 0x09 + 1.5 as above; 0x1A = field 3, wire type 2; 0x0D = 13 = strlen("brain.Event:2").
  const std::string expected =
      bytes({0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xF8, 0x3F, 0x1A, 0x0D}) + "brain.Event:2";
  EXPECT_EQ(encode_file_version_event(1.5), expected);
}

TEST(TensorBoardEvent, NegativeStepTakesTenVarintBytes) {
  // int64 -1 is 0xFFFF'FFFF'FFFF'FFFF: nine bytes of 0xFF (7 bits each, continuation set) and 0x01.
  const std::string event = encode_scalar_event(0.0, -1, "t", 0.0f);
  EXPECT_EQ(event.substr(9, 11), bytes({0x10, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01}));
}

TEST(TfRecord, FrameLayout) {
  const std::string data = "123456789";
  const std::string frame = tfrecord_frame(data);
  ASSERT_EQ(frame.size(), 8u + 4u + 9u + 4u);
  EXPECT_EQ(frame.substr(0, 8), bytes({9, 0, 0, 0, 0, 0, 0, 0}));  // uint64 length, little-endian
  uint32_t length_crc, data_crc;
  std::memcpy(&length_crc, frame.data() + 8, 4);
  std::memcpy(&data_crc, frame.data() + 21, 4);
  EXPECT_EQ(length_crc, masked_crc32c(frame.data(), 8));
  EXPECT_EQ(frame.substr(12, 9), data);
  EXPECT_EQ(data_crc, 0xC78AB0E5u);  // the masked check value above
}

}  // namespace
}  // namespace keel
