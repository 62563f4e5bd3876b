// Runs a TokenizerPipeline over a document, in the tokenizers library's order: added tokens
// are cut out of the raw text first; each stretch between them is normalized on its own (so
// Llama 2's Prepend "▁" applies after every special token too), pre-tokenized into words, and
// each word goes through the BPE model. Byte-level words are mapped through GPT-2's
// byte-to-unicode table just before the model, which is where the library's ByteLevel puts it
// when ByteLevel is the last pre-tokenizer (the reader refuses it anywhere else).
#include "tokenize/json_tokenizer.h"
#include "tokenize/replace_all.h"

#include <new>

#include "host/errors.h"

namespace keel {
namespace {

// A pre-token on its way through the pre-tokenizer steps; `text` points into the document or
// into a string the step before owns for as long as the words made from it are being encoded.
struct Word {
  std::string_view text;
  bool at_start;  // begins at offset 0 of the document (Metaspace's prepend_scheme "first")
};


void normalize(const std::vector<NormalizeStep>& steps, std::string& text) {
  for (const auto& step : steps) {
    if (step.kind == NormalizeStep::Kind::prepend) {
      if (!text.empty()) text.insert(0, step.text);
    } else {
      replace_all(text, step.text, step.replacement);
    }
  }
}

// Each replacement begins a word (the library's MergedWithNext).
template <typename Emit>
void split_at_replacements(std::string_view text, const std::string& replacement, bool at_start, Emit&& emit) {
  size_t begin = 0;
  for (size_t hit = text.find(replacement, 1); hit != std::string_view::npos;
       hit = text.find(replacement, hit + replacement.size())) {
    if (hit > begin) emit(Word{text.substr(begin, hit - begin), at_start && begin == 0});
    begin = hit;
  }
  if (begin < text.size()) emit(Word{text.substr(begin), at_start && begin == 0});
}

class PipelineTokenizer : public Tokenizer {
 public:
  explicit PipelineTokenizer(TokenizerPipeline pipeline) : p_(std::move(pipeline)) {}

  // Memory stays a small multiple of the document: words are encoded as the pre-tokenizer
  // yields them, one step's output feeding the next, never gathered into a list.
  void encode(std::string_view text, const std::string& where, std::vector<uint32_t>& ids) const override {
    const size_t bad = find_invalid_utf8(text);
    if (bad != std::string_view::npos)
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT, where + ": byte offset " + std::to_string(bad) +
                                                     ": not valid UTF-8 (a tokenizer.json tokenizer reads Unicode text)");
    try {
      RegexWorkBudget budget = RegexWorkBudget::for_document(text.size());
      std::string stretch;
      for (const auto& piece : p_.added.split(text)) {
        if (piece.is_token) {
          ids.push_back(piece.id);
          continue;
        }
        std::string_view normalized = piece.text;
        if (!p_.normalizers.empty()) {
          stretch.assign(piece.text);
          normalize(p_.normalizers, stretch);
          normalized = stretch;
        }
        if (!normalized.empty()) pre_tokenize(0, Word{normalized, piece.offset == 0}, where, budget, ids);
      }
    } catch (const std::bad_alloc&) {
      throw KeelError(KEEL_ERR_OUT_OF_MEMORY, where + ": out of memory while tokenizing this document of " +
                                                 std::to_string(text.size()) + " bytes (" + p_.kind +
                                                 " reads a document whole; split it into smaller files)");
    }
  }

  int64_t vocab_size() const override { return p_.vocab_size; }
  std::string describe() const override {
    return p_.kind + " from " + p_.file + " (vocabulary " + std::to_string(p_.vocab_size) + ")";
  }

  std::string decode(const std::vector<uint32_t>& ids, bool skip_special) const override {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      auto it = p_.token_by_id.find(ids[i]);
      if (it == p_.token_by_id.end())
        throw KeelError(KEEL_ERR_INVALID_ARGUMENT, p_.file + ": id " + std::to_string(ids[i]) + " at index " +
                                                       std::to_string(i) + " is no token of this tokenizer (vocabulary " +
                                                       std::to_string(p_.vocab_size) + ")");
      if (!(skip_special && p_.special_ids.count(ids[i]))) tokens.push_back(it->second);
    }
    return decode_tokens(p_.decoder, std::move(tokens));
  }
  std::optional<uint32_t> token_id(std::string_view token) const override {
    auto it = p_.id_by_token.find(std::string(token));
    return it == p_.id_by_token.end() ? std::nullopt : std::optional<uint32_t>(it->second);
  }
  std::optional<Token> token_of(uint32_t id) const override {
    auto it = p_.token_by_id.find(id);
    if (it == p_.token_by_id.end()) return std::nullopt;
    return Token{it->second, p_.special_ids.count(id) > 0};
  }

 private:
  // Runs pre-tokenizer steps [step, end) over `word` and encodes each word they yield.
  void pre_tokenize(size_t step, Word word, const std::string& where, RegexWorkBudget& budget,
                    std::vector<uint32_t>& ids) const {
    if (step == p_.pre_tokenizers.size()) return encode_word(word.text, where, ids);
    const PreTokenizeStep& s = p_.pre_tokenizers[step];
    auto next = [&](Word w) { pre_tokenize(step + 1, w, where, budget, ids); };
    auto split = [&](const RegexSplitter& regex, SplitBehavior behavior, Word w) {
      regex.split(w.text, behavior, where, budget, [&](std::string_view piece) {
        next(Word{piece, w.at_start && piece.data() == w.text.data()});
      });
    };
    switch (s.kind) {
      case PreTokenizeStep::Kind::split:
        return split(*s.regex, s.behavior, word);
      case PreTokenizeStep::Kind::byte_level: {
        std::string spaced;
        if (s.add_prefix_space && word.text[0] != ' ') spaced = " " + std::string(word.text), word.text = spaced;
        return s.regex ? split(*s.regex, SplitBehavior::isolated, word) : next(word);
      }
      case PreTokenizeStep::Kind::metaspace: {
        std::string replaced(word.text);
        replace_all(replaced, " ", s.replacement);
        const bool starts = replaced.compare(0, s.replacement.size(), s.replacement) == 0;
        if (!starts && (s.prepend == PreTokenizeStep::Prepend::always ||
                        (s.prepend == PreTokenizeStep::Prepend::first && word.at_start)))
          replaced.insert(0, s.replacement);
        if (!s.metaspace_split) return next(Word{replaced, word.at_start});
        return split_at_replacements(replaced, s.replacement, word.at_start, next);
      }
    }
  }

  void encode_word(std::string_view word, const std::string& where, std::vector<uint32_t>& ids) const {
    if (!p_.byte_level) return p_.model->encode_word(word, where, ids);
    std::string mapped;
    for (unsigned char b : word) mapped += byte_level_char(b);
    p_.model->encode_word(mapped, where, ids);
  }

  TokenizerPipeline p_;
};

}  // namespace

const char* const kGpt2SplitPattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

const std::string& byte_level_char(unsigned char b) {
  // Printable Latin-1 bytes stand for themselves; the other 68 take U+0100 onwards in order.
  static const auto table = [] {
    std::vector<std::string> chars(256);
    uint32_t next_spare = 256;
    for (int byte = 0; byte < 256; ++byte) {
      const bool printable = (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) || (byte >= 0xAE);
      const uint32_t cp = printable ? uint32_t(byte) : next_spare++;
      std::string& utf8 = chars[size_t(byte)];
      if (cp < 0x80) utf8 += char(cp);
      else utf8 += char(0xC0 | cp >> 6), utf8 += char(0x80 | (cp & 0x3F));
    }
    return chars;
  }();
  return table[b];
}

std::unique_ptr<Tokenizer> make_pipeline_tokenizer(TokenizerPipeline pipeline) {
  return std::make_unique<PipelineTokenizer>(std::move(pipeline));
}

}  // namespace keel
