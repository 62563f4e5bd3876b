// The safetensors reader accepts a file only when its tensors' data_offsets, sorted, tile the
// data exactly (from byte 0, no gap, no overlap, ending where the file ends), as Hugging Face's
// reader does: otherwise a stray byte shifts every tensor and training goes on from wrong values.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "host/errors.h"
#include "io/safetensors.h"

namespace {

// An 8-byte length, the header padded with spaces to a multiple of 8, `between`, then the data.
std::vector<unsigned char> file_of(const nlohmann::json& header, const std::vector<float>& data,
                                   const std::string& between = "") {
  std::string text = header.dump();
  while (text.size() % 8) text += ' ';
  const uint64_t length = text.size();
  std::string file(reinterpret_cast<const char*>(&length), 8);
  file += text + between;
  file.append(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(float));
  return std::vector<unsigned char>(file.begin(), file.end());
}

nlohmann::json f32(int64_t elements, uint64_t begin, uint64_t end) {
  return {{"dtype", "F32"}, {"shape", {elements}}, {"data_offsets", {begin, end}}};
}

// The message of the KeelError the reader throws on `bytes`, or "" when it accepts them.
std::string refusal_of(std::vector<unsigned char> bytes) {
  try {
    keel::SafetensorsFile file("model.safetensors", std::move(bytes));
  } catch (const keel::KeelError& e) {
    return e.what();
  }
  return "";
}

const std::vector<float> kSixValues = {1, 2, 3, 4, 5, 6};  // a: [1, 2, 3, 4], b: [5, 6]

TEST(SafetensorsTiling, ATiledFileLoadsExactly) {
  const nlohmann::json header = {{"a", f32(4, 0, 16)}, {"empty", f32(0, 16, 16)}, {"b", f32(2, 16, 24)}};
  keel::SafetensorsFile file("model.safetensors", file_of(header, kSixValues));
  std::vector<float> a(4), b(2);
  file.read_f32("a", 0, 4, a.data());
  file.read_f32("b", 0, 2, b.data());
  EXPECT_EQ(a, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(b, (std::vector<float>{5, 6}));
  EXPECT_EQ(file.tensor("empty").bytes, 0u);
}

TEST(SafetensorsTiling, StrayBytesBeforeTheDataAreRefused) {
  // The header unchanged, four bytes inserted before the data: each tensor would read one float
  // early, and four bytes at the end would belong to no tensor.
  const nlohmann::json header = {{"a", f32(4, 0, 16)}, {"b", f32(2, 16, 24)}};
  EXPECT_EQ(refusal_of(file_of(header, kSixValues, std::string(4, '\0'))),
            "model.safetensors: not a valid safetensors file: bytes [24, 28) of the data belong to no tensor; "
            "expected the tensors' data_offsets to cover the data exactly, ending where the file ends");
}

TEST(SafetensorsTiling, DataThatDoesNotStartAtByteZeroIsRefused) {
  const nlohmann::json header = {{"a", f32(4, 4, 20)}, {"b", f32(1, 20, 24)}};
  EXPECT_EQ(refusal_of(file_of(header, kSixValues)),
            "model.safetensors: not a valid safetensors file: bytes [0, 4) of the data belong to no tensor "
            "(the next, tensor \"a\", begins at byte 4); expected the tensors' data_offsets to cover the data "
            "exactly, from byte 0");
}

TEST(SafetensorsTiling, AGapBetweenTensorsIsRefused) {
  const nlohmann::json header = {{"a", f32(3, 0, 12)}, {"b", f32(2, 16, 24)}};
  EXPECT_EQ(refusal_of(file_of(header, kSixValues)),
            "model.safetensors: not a valid safetensors file: bytes [12, 16) of the data belong to no tensor "
            "(the next, tensor \"b\", begins at byte 16); expected the tensors' data_offsets to cover the data "
            "exactly, from byte 0");
}

TEST(SafetensorsTiling, OverlappingTensorsAreRefused) {
  // b's range lies inside a's; c covers the rest, so the byte count alone adds up.
  const nlohmann::json header = {{"a", f32(4, 0, 16)}, {"b", f32(2, 8, 16)}, {"c", f32(2, 16, 24)}};
  EXPECT_EQ(refusal_of(file_of(header, kSixValues)),
            "model.safetensors: not a valid safetensors file: tensor \"b\" (data_offsets [8, 16]) overlaps tensor "
            "\"a\" (data_offsets [0, 16]); expected each byte of the data to belong to one tensor");
}

TEST(SafetensorsTiling, TwoTensorsOnTheSameBytesAreRefused) {
  const nlohmann::json header = {{"a", f32(2, 0, 8)}, {"b", f32(2, 0, 8)}, {"c", f32(4, 8, 24)}};
  EXPECT_EQ(refusal_of(file_of(header, kSixValues)),
            "model.safetensors: not a valid safetensors file: tensor \"b\" (data_offsets [0, 8]) overlaps tensor "
            "\"a\" (data_offsets [0, 8]); expected each byte of the data to belong to one tensor");
}

TEST(SafetensorsTiling, AShortBufferIsRefused) {
  const nlohmann::json header = {{"a", f32(4, 0, 16)}, {"b", f32(4, 16, 32)}};
  EXPECT_EQ(refusal_of(file_of(header, kSixValues)),
            "model.safetensors: not a valid safetensors file: truncated: tensor \"b\" ends at byte 32 of the data "
            "but the data has 24 bytes");
}

TEST(SafetensorsTiling, AHeaderLengthOfZeroIsRefused) {
  const std::vector<unsigned char> bytes(64, 0);
  EXPECT_EQ(refusal_of(bytes), "model.safetensors: not a valid safetensors file: the header length is 0; expected "
                               "at least the 2 bytes of an empty JSON object");
}

TEST(SafetensorsTiling, AHeaderLengthPastTheBoundIsRefused) {
  std::vector<unsigned char> bytes(64, ' ');
  const uint64_t length = uint64_t(1) << 40;
  std::memcpy(bytes.data(), &length, 8);
  EXPECT_EQ(refusal_of(bytes), "model.safetensors: not a valid safetensors file: the header length 1099511627776 "
                               "is more than the 100000000 bytes a header may have");
}

}  // namespace

namespace {

// A file of one 16-bit tensor `name` with the given little-endian bit patterns.
std::vector<unsigned char> half_file(const std::string& dtype, const std::vector<uint16_t>& bits) {
  const nlohmann::json header = {
      {"x", {{"dtype", dtype}, {"shape", {bits.size()}}, {"data_offsets", {0, 2 * bits.size()}}}}};
  std::string text = header.dump();
  while (text.size() % 8) text += ' ';
  const uint64_t length = text.size();
  std::string file(reinterpret_cast<const char*>(&length), 8);
  file += text;
  for (uint16_t b : bits) file += {char(b & 0xff), char(b >> 8)};
  return std::vector<unsigned char>(file.begin(), file.end());
}

}  // namespace

// Hugging Face checkpoints are mostly bf16 (some f16): read_as_f32 widens them exactly, the
// oracle being each format's definition (bf16: the high half of an fp32; f16: IEEE binary16).
TEST(SafetensorsWidening, Bf16IsTheHighHalfOfAnFp32) {
  const std::vector<float> expected = {1.0f, -2.5f, 3.140625f, 0.0f, -0.0f, 1e-38f};
  std::vector<uint16_t> bits;
  for (float v : expected) {
    uint32_t wide;
    std::memcpy(&wide, &v, 4);
    bits.push_back(uint16_t(wide >> 16));
  }
  keel::SafetensorsFile file("model.safetensors", half_file("BF16", bits));
  std::vector<float> out(bits.size());
  file.read_as_f32("x", out.data());
  for (size_t i = 0; i < bits.size(); ++i) {
    uint32_t wide = uint32_t(bits[i]) << 16;
    float truncated;
    std::memcpy(&truncated, &wide, 4);
    EXPECT_EQ(out[i], truncated) << i;
  }
  EXPECT_EQ(out[1], -2.5f);
}

TEST(SafetensorsWidening, F16CoversNormalsSubnormalsInfinityAndNaN) {
  // 1.0, -2.0, 65504 (largest), 2^-14 (smallest normal), 2^-24 (smallest subnormal),
  // 3·2^-24 (a subnormal with two bits), +inf, a NaN
  const std::vector<uint16_t> bits = {0x3c00, 0xc000, 0x7bff, 0x0400, 0x0001, 0x0003, 0x7c00, 0x7e00};
  keel::SafetensorsFile file("model.safetensors", half_file("F16", bits));
  std::vector<float> out(bits.size());
  file.read_as_f32("x", out.data());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], 65504.0f);
  EXPECT_EQ(out[3], std::ldexp(1.0f, -14));
  EXPECT_EQ(out[4], std::ldexp(1.0f, -24));
  EXPECT_EQ(out[5], 3.0f * std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isinf(out[6]) && out[6] > 0);
  EXPECT_TRUE(std::isnan(out[7]));
}

TEST(SafetensorsWidening, OtherDtypesAreRefusedNamingTheTensor) {
  keel::SafetensorsFile file("model.safetensors", half_file("I16", {1, 2}));
  std::vector<float> out(2);
  try {
    file.read_as_f32("x", out.data());
    FAIL() << "an I16 tensor was read as floats";
  } catch (const keel::KeelError& e) {
    EXPECT_NE(std::string(e.what()).find("tensor \"x\" is I16; expected F32, BF16 or F16"), std::string::npos) << e.what();
  }
}
