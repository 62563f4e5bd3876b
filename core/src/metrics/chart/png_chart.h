// A chart drawn into pixels, the raster twin of svg_chart: same layout, same colours.
#pragma once

#include "metrics/chart/chart.h"
#include "metrics/chart/raster.h"

namespace keel::chart {

Image render_raster(const Chart& chart, const Layout& layout);

}  // namespace keel::chart
