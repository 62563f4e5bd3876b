// `keel plot METRICS.jsonl --out loss.svg|loss.png [--title T]`: the training and validation
// loss of a run against step, drawn without any plotting library.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace keel {

// args: what follows `keel plot`. Returns the exit status: 0 when written, 1 for a file that
// cannot be read or written or holds no losses, 2 for a misused command line. Messages go to err.
int plot_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace keel
