// 8-bit truecolour, no interlace, filter type 0 on every row: the chart is mostly flat colour,
// which deflate compresses well without per-row filtering. zlib provides deflate and the
// CRC-32 that PNG chunks carry (PNG's CRC is zlib's, not the CRC-32C of io/crc32c.h).
#include "metrics/chart/png_file.h"

#include <zlib.h>

#include "host/errors.h"

namespace keel::chart {
namespace {

void put_u32_big_endian(std::string& out, uint32_t value) {
  for (int shift = 24; shift >= 0; shift -= 8) out += char((value >> shift) & 0xFF);
}

void put_chunk(std::string& png, const char type[4], const std::string& data) {
  put_u32_big_endian(png, uint32_t(data.size()));
  const std::string typed = std::string(type, 4) + data;
  png += typed;
  put_u32_big_endian(png, uint32_t(crc32(0, reinterpret_cast<const Bytef*>(typed.data()), uInt(typed.size()))));
}

}  // namespace

std::string encode_png(const Image& image) {
  const size_t row_bytes = size_t(image.width()) * 3;
  std::string raw;
  raw.reserve((row_bytes + 1) * size_t(image.height()));
  for (int y = 0; y < image.height(); ++y) {
    raw += '\0';  // filter type: none
    raw.append(reinterpret_cast<const char*>(image.rgb().data()) + size_t(y) * row_bytes, row_bytes);
  }
  uLongf compressed_bytes = compressBound(uLong(raw.size()));
  std::string compressed(compressed_bytes, '\0');
  if (compress2(reinterpret_cast<Bytef*>(compressed.data()), &compressed_bytes,
                reinterpret_cast<const Bytef*>(raw.data()), uLong(raw.size()), Z_BEST_COMPRESSION) != Z_OK)
    throw KeelError(KEEL_ERR_INTERNAL, "encode_png: zlib compress2 failed");
  compressed.resize(compressed_bytes);

  std::string header;
  put_u32_big_endian(header, uint32_t(image.width()));
  put_u32_big_endian(header, uint32_t(image.height()));
  header += std::string{8, 2, 0, 0, 0};  // bit depth 8, colour type 2 (RGB), deflate, filter 0, no interlace
  std::string png = "\x89PNG\r\n\x1a\n";
  put_chunk(png, "IHDR", header);
  put_chunk(png, "IDAT", compressed);
  put_chunk(png, "IEND", "");
  return png;
}

}  // namespace keel::chart
