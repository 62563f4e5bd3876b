// The tokenizer prepare-data runs over each document: the built-in byte-level one (token =
// byte) or a Hugging Face tokenizer.json of the two BPE kinds in use (byte-level BPE as GPT-2
// and Llama 3 use it; SentencePiece-style BPE with byte fallback as Llama 2 uses it). What a
// file may hold, and what is refused, is in tokenizer_json.cpp and docs/data.md. It also
// decodes ids back to text (keel.Tokenizer and generate through the embedding API).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
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

  // The text of `ids` as the tokenizers library's decode gives it: each id's token (special
  // added tokens left out when skip_special), through the file's decoder; the bytes tokenizer
  // gives the bytes themselves, which need not be UTF-8. Throws KeelError naming the id and its
  // index when no token has it, and the decoder when Keel cannot run it.
  virtual std::string decode(const std::vector<uint32_t>& ids, bool skip_special) const = 0;
  // The id of `token` (an added token, or one of the model's vocabulary), if it has one.
  virtual std::optional<uint32_t> token_id(std::string_view token) const = 0;
  // The token whose id is `id`, and whether it is a special added token; nullopt if none.
  struct Token {
    std::string text;
    bool special = false;
  };
  virtual std::optional<Token> token_of(uint32_t id) const = 0;
};

// `spec` is "bytes" or the path of a tokenizer.json. Throws KeelError naming the file and the
// JSON path of whatever it refuses.
std::unique_ptr<Tokenizer> open_tokenizer(const std::string& spec);

// The byte offset of the first byte that does not begin a valid UTF-8 sequence, or npos.
size_t find_invalid_utf8(std::string_view text);

}  // namespace keel
