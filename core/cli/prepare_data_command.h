// `keel prepare-data INPUT... --out DIR [--tokenizer PATH|bytes] [--val-fraction F]
// [--shard-tokens N] [--strict-text]`: the command line of data/prepare_data.h, which does the work.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace keel {

extern const char* const kPrepareDataUsage;  // `keel prepare-data --help`

// args are the words after "prepare-data". Prints a summary to out; returns 0, 1 after an
// error (the message names the path) or 2 for a misused command line (with the usage).
int prepare_data_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace keel
