// Whether a file is UTF-8 text, read in chunks so a large file costs no more memory than one
// chunk. prepare-data asks it of each file it finds in a folder when the tokenizer reads
// Unicode (a tokenizer.json): a file in another encoding is skipped and counted there instead
// of stopping the run halfway (pyenv's stdlib holds test/cjkencodings/big5.txt).
#pragma once

#include <cstdint>
#include <string>

namespace keel {

// The byte offset of the first byte of `path` that does not begin a valid UTF-8 sequence, or
// -1 when the whole file is valid. Throws KeelError naming the path when it cannot be read.
int64_t first_invalid_utf8_byte(const std::string& path);

}  // namespace keel
