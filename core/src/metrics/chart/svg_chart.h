// A chart as an SVG document: text any browser shows and any XML parser reads. Each series is
// one <polyline id="NAME"> with one point per data point, in data order.
#pragma once

#include <string>

#include "metrics/chart/chart.h"

namespace keel::chart {

std::string render_svg(const Chart& chart, const Layout& layout);

}  // namespace keel::chart
