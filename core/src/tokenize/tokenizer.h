// The tokenizer prepare-data runs over each document: the built-in byte-level one (token =
// byte) or a Hugging Face tokenizer.json of the two BPE kinds in use (byte-level BPE as GPT-2
// and Llama 3 use it; SentencePiece-style BPE with byte fallback as Llama 2 uses it). What a
// file may hold, and what is refused, is in tokenizer_json.cpp and docs/data.md.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace keel {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Appends the ids of `text` to `ids`. Throws KeelError naming `where` (the document) when
  // the text cannot be tokenized (not UTF-8, a character the vocabulary lacks with no unk).
  virtual void encode(std::string_view text, const std::string& where, std::vector<uint32_t>& ids) const = 0;
  // One past the largest id it can produce, added tokens included.
  virtual int64_t vocab_size() const = 0;
  // True when the ids of a text are the ids of any cut of it, concatenated (bytes): the
  // caller may then feed a document in chunks instead of whole.
  virtual bool encodes_in_chunks() const { return false; }
  // True when a text must be valid UTF-8 to be encoded (a tokenizer.json); false for bytes.
  virtual bool reads_unicode() const { return true; }
  // "bytes (vocabulary 256)", "byte-level BPE from FILE (vocabulary N)", ...
  virtual std::string describe() const = 0;
};

// `spec` is "bytes" or the path of a tokenizer.json. Throws KeelError naming the file and the
// JSON path of whatever it refuses.
std::unique_ptr<Tokenizer> open_tokenizer(const std::string& spec);

// The byte offset of the first byte that does not begin a valid UTF-8 sequence, or npos.
size_t find_invalid_utf8(std::string_view text);

}  // namespace keel
