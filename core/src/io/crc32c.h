// CRC-32C (Castagnoli): the checksum of checkpoint files and of TensorBoard's record framing.
#pragma once

#include <cstddef>
#include <cstdint>

namespace keel {

// Continues a running CRC: crc32c(data2, n2, crc32c(data1, n1)) == crc32c of both.
uint32_t crc32c(const void* data, size_t bytes, uint32_t crc = 0);

}  // namespace keel
