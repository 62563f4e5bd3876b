// How large a tokenizer.json Keel will read. The file is untrusted, and nlohmann's parsed form of
// it takes several times the file's bytes (a 480 MB file grew to 3.5 GB), so everything whose
// count drives memory is counted in a streaming pass over the text first, and a file past a
// limit is refused, naming the file, the part and the limit, before any large structure exists.
#pragma once

#include <keel_support/common/json_parse.hpp>  // defines: kMaxJsonDepth

#include <cstddef>
#include <string>
#include <vector>

namespace keel {

struct TokenizerFileLimits {
  size_t max_file_bytes = size_t(512) << 20;    // Llama 3's file is 9 MB
  size_t max_vocabulary = size_t(1) << 22;      // model.vocab entries: 4.2M; the largest in use are ~1M
  size_t max_merges = size_t(1) << 22;          // model.merges entries
  size_t max_added_tokens = size_t(1) << 18;    // added_tokens entries: 262,144; Llama 3 has 256
  size_t max_json_values = size_t(1) << 25;     // every value in the file, keys not counted: 33.5M
  int max_depth = keel_support::kMaxJsonDepth;  // nesting of arrays and objects
};

// Counts what the limits bound in `text` (the file `path`'s bytes) without building it; throws
// KeelError naming `path` and the limit first exceeded, or the JSON syntax error.
void check_tokenizer_file_limits(const std::vector<unsigned char>& text, const std::string& path,
                                 const TokenizerFileLimits& limits);

}  // namespace keel
