// PNG encoding of an RGB image: signature, IHDR, one zlib-compressed IDAT, IEND.
#pragma once

#include <string>

#include "metrics/chart/raster.h"

namespace keel::chart {

std::string encode_png(const Image& image);

}  // namespace keel::chart
