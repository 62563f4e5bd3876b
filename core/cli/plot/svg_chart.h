// A chart as an SVG document: text any browser shows and any XML parser reads, with no font or
// image encoder of ours. Each series is one <polyline id="NAME"> with one point per data point,
// in data order; each tick is a <g class="tick-x|tick-y"> holding its grid line and its label.
#pragma once

#include <string>

#include "plot/chart.h"

namespace keel::chart {

std::string render_svg(const Chart& chart, const Layout& layout);

}  // namespace keel::chart
