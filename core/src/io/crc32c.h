// CRC-32C (Castagnoli): the checksum of checkpoint files and of TensorBoard's record framing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace keel {

// Continues a running CRC: crc32c(data2, n2, crc32c(data1, n1)) == crc32c of both.
uint32_t crc32c(const void* data, size_t bytes, uint32_t crc = 0);

// "0a1b2c3d": 8 lowercase hex digits, as checkpoint manifests store a CRC.
std::string crc32c_hex(uint32_t crc);

}  // namespace keel
