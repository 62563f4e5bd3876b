// `keel prepare-data INPUT... --out DIR [--val-fraction F] [--shard-tokens N]`: text files
// and folders → llm.c token shards with the built-in byte-level tokenizer (token = byte).
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace keel {

// args are the words after "prepare-data". Prints a summary to out; returns 0, 1 after an
// error (the message names the path) or 2 for a misused command line (with the usage).
int prepare_data_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace keel
