// `keel plot METRICS.jsonl [MORE.jsonl ...] --out loss.svg [--title T] [--x ...] [--y ...]`: the
// training and validation loss of one run, or of several on one chart, against step, tokens or
// bytes communicated, as an SVG file (text a browser draws), with no plotting library. Built into
// the keel CLI alone (core/CMakeLists.txt: keel_plot), not into libkeel-core.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace keel {

extern const char* const kPlotUsage;  // `keel plot --help`

// args: what follows `keel plot`. Returns the exit status: 0 when written, 1 for a file that
// cannot be read or written or holds no losses, 2 for a misused command line. Messages go to err.
int plot_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace keel
