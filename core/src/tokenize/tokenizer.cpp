// open_tokenizer: "bytes" (token = byte, the default) or a tokenizer.json; and the UTF-8
// check every tokenizer.json tokenizer runs first (the tokenizers library only ever sees str).
#include "tokenize/tokenizer.h"

#include "host/errors.h"
#include "tokenize/json_tokenizer.h"

namespace keel {
namespace {

class ByteTokenizer : public Tokenizer {
 public:
  void encode(std::string_view text, const std::string&, std::vector<uint32_t>& ids) const override {
    for (unsigned char b : text) ids.push_back(b);
  }
  int64_t vocab_size() const override { return 256; }
  bool encodes_in_chunks() const override { return true; }
  bool reads_unicode() const override { return false; }
  std::string describe() const override { return "bytes (vocabulary 256)"; }
  std::string decode(const std::vector<uint32_t>& ids, bool) const override {
    std::string bytes;
    bytes.reserve(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] > 255)
        throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "bytes tokenizer: id " + std::to_string(ids[i]) + " at index " +
                                                       std::to_string(i) + " is not a byte (vocabulary 256)");
      bytes += static_cast<char>(ids[i]);
    }
    return bytes;
  }
  std::optional<uint32_t> token_id(std::string_view token) const override {
    return token.size() == 1 ? std::optional<uint32_t>(static_cast<unsigned char>(token[0])) : std::nullopt;
  }
  std::optional<Token> token_of(uint32_t id) const override {
    return id < 256 ? std::optional<Token>(Token{std::string(1, static_cast<char>(id)), false}) : std::nullopt;
  }
};

}  // namespace

std::unique_ptr<Tokenizer> open_tokenizer(const std::string& spec) {
  if (spec == "bytes") return std::make_unique<ByteTokenizer>();
  return make_pipeline_tokenizer(read_tokenizer_json(spec));
}

size_t find_invalid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp, min;
    if ((c & 0xE0) == 0xC0) len = 2, cp = c & 0x1F, min = 0x80;
    else if ((c & 0xF0) == 0xE0) len = 3, cp = c & 0x0F, min = 0x800;
    else if ((c & 0xF8) == 0xF0) len = 4, cp = c & 0x07, min = 0x10000;
    else return i;
    if (i + len > n) return i;
    for (size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return i;
      cp = cp << 6 | (s[i + k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::string_view::npos;
}

}  // namespace keel
