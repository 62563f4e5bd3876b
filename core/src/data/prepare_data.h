// Text files and folders → llm.c token shards, tokenized byte by byte (the default) or with a
// Hugging Face tokenizer.json (core/src/tokenize). The work behind `keel prepare-data`, whose
// command line and report live in core/cli/prepare_data_command.cpp; tests and bindings call it with options.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tokenize/tokenizer.h"

namespace keel {

constexpr int64_t kMinShardTokens = 1024;  // the smallest shard size write_prepared_shards takes

struct PrepareDataOptions {
  std::vector<std::string> inputs;  // text files or folders (read recursively)
  std::string out_dir;
  double val_fraction = 0.05;       // in [0, 1): about this fraction of the bytes, in whole files, is validation
  int64_t shard_tokens = 100'000'000;  // tokens per shard, from kMinShardTokens to kShardMaxTokens
  std::string tokenizer = "bytes";  // or the path of a tokenizer.json
  bool strict_text = false;         // a folder's file that is not UTF-8 fails the run instead of being skipped
};

struct PrepareDataDocument {
  std::string path;  // as found, for reading and messages
  std::string name;  // relative to its input, for the validation choice
  int64_t bytes = 0;
};

// What the inputs hold, found before any shard is written, with the tokenizer that will read them.
struct PrepareDataListing {
  std::unique_ptr<Tokenizer> tokenizer;
  std::vector<PrepareDataDocument> documents;  // sorted by path
  std::vector<std::string> binary_files;       // skipped: a NUL byte in the first 8 KiB
  std::vector<std::string> not_utf8_files;     // "PATH (byte N)", skipped from folders when the tokenizer reads Unicode
  std::vector<std::string> repeated_files;     // "PATH (the same file as FIRST)": a file reached twice is read once
  int64_t hidden_entries = 0, empty_files = 0;
};

struct PreparedSplit {
  size_t documents = 0;
  int64_t tokens = 0;
  std::vector<std::string> files;  // the published shards, in order
  int64_t stale_removed = 0;       // shards of an earlier run that the new set replaced
};

struct PreparedShards {
  PreparedSplit train, val;
};

// Opens the tokenizer, lists the documents and creates options.out_dir. Throws KeelError naming
// the path when an input cannot be read, none holds text, or the folder cannot be made.
PrepareDataListing list_prepare_data_inputs(const PrepareDataOptions& options);

// Writes train_*.bin and val_*.bin into options.out_dir, all at once or not at all. Throws
// KeelError naming the path on failure, or StopRequested (mesh/stop_signals.h) when a stop signal
// arrives while its handlers are installed.
PreparedShards write_prepared_shards(const PrepareDataOptions& options, const PrepareDataListing& listing);

}  // namespace keel
