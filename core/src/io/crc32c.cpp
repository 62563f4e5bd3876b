// Table-driven CRC-32C, reflected polynomial 0x82F63B78, processing 8 bytes per step
// (slicing-by-8) so checksumming a checkpoint costs far less than writing it.
#include "io/crc32c.h"

#include <array>
#include <cstdio>
#include <cstring>

namespace keel {
namespace {

using Tables = std::array<std::array<uint32_t, 256>, 8>;

Tables make_tables() {
  Tables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
    t[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; ++i)
    for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
  return t;
}

}  // namespace

uint32_t crc32c(const void* data, size_t bytes, uint32_t crc) {
  static const Tables t = make_tables();
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  while (bytes >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);  // little-endian hosts
    word ^= crc;
    crc = t[7][word & 0xFF] ^ t[6][(word >> 8) & 0xFF] ^ t[5][(word >> 16) & 0xFF] ^ t[4][(word >> 24) & 0xFF] ^
          t[3][(word >> 32) & 0xFF] ^ t[2][(word >> 40) & 0xFF] ^ t[1][(word >> 48) & 0xFF] ^ t[0][word >> 56];
    p += 8;
    bytes -= 8;
  }
  while (bytes--) crc = (crc >> 8) ^ t[0][(crc ^ *p++) & 0xFF];
  return ~crc;
}

std::string crc32c_hex(uint32_t crc) {
  char text[16];
  std::snprintf(text, sizeof text, "%08x", crc);
  return text;
}

}  // namespace keel
