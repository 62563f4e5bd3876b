// Text files and folders → llm.c token shards, tokenized byte by byte (the default) or with a
// Hugging Face tokenizer.json (core/src/tokenize). The work behind `keel prepare-data`, whose
// command line lives in core/cli/prepare_data_command.cpp; tests and bindings call it with options.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace keel {

constexpr int64_t kMinShardTokens = 1024;  // the smallest shard prepare_data writes

struct PrepareDataOptions {
  std::vector<std::string> inputs;  // text files or folders (read recursively)
  std::string out_dir;
  double val_fraction = 0.05;       // in [0, 1): about this fraction of the bytes, in whole files, is validation
  int64_t shard_tokens = 100'000'000;  // tokens per shard, from kMinShardTokens to kShardMaxTokens
  std::string tokenizer = "bytes";  // or the path of a tokenizer.json
  std::string shard_tokens_note;    // printed with the listing (the caller clamped the requested size)
  bool strict_text = false;         // a folder's file that is not UTF-8 fails the run instead of being skipped
};

// Writes train_*.bin and val_*.bin into options.out_dir, all at once or not at all, and prints
// what it found and wrote to out. Throws KeelError naming the path on failure, or StopRequested
// (mesh/stop_signals.h) when a stop signal arrives while its handlers are installed.
void prepare_data(const PrepareDataOptions& options, std::ostream& out);

}  // namespace keel
